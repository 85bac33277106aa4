"""The model's ends: the embedding lookup and the LM head (final norm + vocabulary GEMM).

- Embedding: a gather of batch x tokens rows of the table (no FLOPs; reads only those rows).
  Replicated on every TP socket: the table is small beside the layers (0.9 GB in FP8 for
  DeepSeek-R1) and a replicated gather needs no collective, where a vocabulary-split one
  would need an all-reduce of the hidden state. A multi-token-prediction module's input
  projection (DeepSeek's eh_proj and its two norms) follows the gather in the same kernel.
- LM head: the final RMSNorm and the vocabulary GEMM, columns (vocabulary) split over TP,
  then an all-gather of the logits. In prefill only each slot's last position produces
  logits (the next token); in decode every new token does. With tied embeddings the GEMM
  re-reads the embedding table and owns no parameters of its own.
- Sampling, when the serving stack draws the next tokens on the device (``sample``): a
  vector operator over each logit row (``SAMPLE_FLOPS`` a logit), replicated on every socket
  after the gather, whose output is the token ids the next step reads where they are.
  Otherwise the logits go to the host (``Program.host_bytes``).
"""

from __future__ import annotations

from dataclasses import replace

from rdu_sim.graph.builder import GraphBuilder
from rdu_sim.graph.digraph import DiGraph
from rdu_sim.graph.operator import Operator, Split, TensorSpec
from rdu_sim.graph.ops import SAMPLE_FLOPS, act, linear, rmsnorm
from rdu_sim.graph.shape import INDEX, Precision, StepShape, token_axes
from rdu_sim.models.figures import mtp_projection_matmul_params
from rdu_sim.models.layers import Architecture

EMBEDDING = "embed.gather"  # the operator, and the name of the embedding table


def embedding_graph(arch: Architecture, shape: StepShape, precision: Precision) -> DiGraph:
    """Token ids -> hidden states, one gathered row per new token; for a multi-token-
    prediction module (``mtp_projection``), then each row's RMSNorm (``mtp.enorm``) beside
    that of the hidden state the module is given for its position (``h_prev``: the main
    model's, or the module's own last), the two concatenated and projected 2 x hidden ->
    hidden (``mtp.eh_proj``), replicated on every socket like the gather (as vLLM and SGLang
    run it)."""
    ids = TensorSpec("token_ids", token_axes(shape), INDEX)
    mtp = mtp_projection_matmul_params(arch) > 0
    rows = (*token_axes(shape), arch.hidden_size)
    previous = act("h_prev", rows, precision)
    b = GraphBuilder(f"{arch.name}.embedding", [ids, previous] if mtp else [ids])
    table = arch.vocab_size * arch.hidden_size
    gathered = b.add(
        Operator(
            EMBEDDING,
            "gather",
            inputs=(ids,),
            outputs=(act("x_emb" if mtp else "x", rows, precision),),
            weight_params=table,
            weight_bytes=table * precision.weights,
            weight_read_bytes=shape.rows * arch.hidden_size * precision.weights,
        )
    ).outputs[0]
    if mtp:
        e_n = b.add(rmsnorm("mtp.enorm", gathered, "x_emb_n", precision, Split())).outputs[0]
        h_n = b.add(rmsnorm("mtp.hnorm", previous, "h_prev_n", precision, Split())).outputs[0]
        project = linear(
            "mtp.eh_proj",
            e_n,
            (act("x", rows, precision),),
            rows=shape.rows,
            k=2 * arch.hidden_size,
            n=arch.hidden_size,
            precision=precision,
            split=Split(),
        )
        b.add(replace(project, inputs=(e_n, h_n)))  # the concatenation: the product's two halves
    return b.finish(["x"])


def logit_rows(shape: StepShape) -> tuple[int, int]:
    """The sequences that produce logits and their positions each: a prefill's last one (a
    mixed step's decode rows too, one each), all new ones in decode."""
    if shape.phase == "prefill":
        return shape.sequences, 1
    return shape.batch, shape.tokens


def lm_head_graph(
    arch: Architecture, shape: StepShape, precision: Precision, sample: bool = False
) -> DiGraph:
    """Final norm and vocabulary projection of the positions that produce logits, and the
    sampling of the next tokens from them when ``sample`` (the stack samples on the device)."""
    sequences, rows = logit_rows(shape)
    x = act("y", (sequences, rows, arch.hidden_size), precision)
    b = GraphBuilder(f"{arch.name}.lm_head", [x])
    xn = b.add(rmsnorm("final_norm", x, "y_n", precision, Split())).outputs[0]
    head = linear(
        "lm_head",
        xn,
        (act("logits", (sequences, rows, arch.vocab_size), precision),),
        rows=sequences * rows,
        k=arch.hidden_size,
        n=arch.vocab_size,
        precision=precision,
        split=Split.along("vocab", "n", "gather"),
        resident=not arch.tie_embeddings,
    )
    if arch.tie_embeddings:
        head = replace(head, weights=EMBEDDING)
    b.add(head)
    if not sample:
        return b.finish(["logits"])
    logits = head.outputs[0]
    b.add(
        Operator(
            "sample",
            "topk",
            inputs=(logits,),
            outputs=(TensorSpec("next_tokens", (sequences, rows), INDEX),),
            vector_flops=SAMPLE_FLOPS * logits.elements,
        )
    )
    return b.finish(["next_tokens"])


def logit_bytes(arch: Architecture, shape: StepShape, precision: Precision) -> float:
    """The bytes of a step's logits (every slot's logit rows over the whole vocabulary)."""
    sequences, rows = logit_rows(shape)
    return sequences * rows * arch.vocab_size * precision.activations
