"""Hand-built Programs and hardware variants for the engine tests (plus checks of the helpers).

Other engine test files import the builders from here (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rdu_sim.compiler.program import (
    CollectiveSpec,
    KernelProgram,
    Placement,
    Program,
    StageProgram,
    TierUsage,
)
from rdu_sim.config import HardwareConfig, load_model
from rdu_sim.shapes import Gemm, StepShape

ROOT = Path(__file__).resolve().parents[1]
_HW: dict[str, HardwareConfig] = {}


def sn40l() -> HardwareConfig:
    """The shipped SN40L hardware file (parsed once per test session)."""
    if "sn40l" not in _HW:
        _HW["sn40l"] = load_model(HardwareConfig, ROOT / "hw_configs" / "sn40l.yaml")
    return _HW["sn40l"]


def hardware(zero: bool = True, **edits: Any) -> HardwareConfig:
    """SN40L with latencies and kernel overheads zeroed (``zero``) and dotted-path edits (an
    engine made with it and no stack adds no host time: these tests check the device's step).

    Edits re-validate through the pydantic model, e.g. ``hardware(**{"system.collective_chunks":
    1})``.
    """
    data = sn40l().model_dump()
    if zero:
        for tier in ("hbm", "ddr"):
            data["socket"][tier]["latency"] = 0.0
        for key in ("program_load", "argument_load", "sync", "layer_loop"):
            data["socket"]["kernel"][key] = 0.0
        for link in ("intra_node_link", "inter_node_link"):
            data["system"][link]["latency"] = 0.0
    for path, value in edits.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return HardwareConfig.model_validate(data)


def stage(
    name: str,
    *,
    pcus: int = 8,
    pmus: int = 8,
    flops: float = 0.0,
    vector_flops: float = 0.0,
    hbm: float = 0.0,
    ddr: float = 0.0,
    sram: float = 0.0,
    hbm_write: float = 0.0,
    inputs: tuple[str, ...] = (),
    out: float = 0.0,
    gemm: Gemm | None = None,
    collective: CollectiveSpec | None = None,
    op: str = "gemm",
) -> StageProgram:
    """A stage with the given per-call work (bytes per tier, FLOPs)."""
    reads = {t: v for t, v in (("hbm", hbm), ("ddr", ddr), ("sram", sram)) if v}
    writes = {"hbm": hbm_write} if hbm_write else {}
    return StageProgram(
        name=name,
        op=op,
        pcus=pcus,
        pmus=pmus,
        flops=flops,
        vector_flops=vector_flops,
        reads=reads,  # type: ignore[arg-type]
        writes=writes,  # type: ignore[arg-type]
        inputs=inputs,
        output_bytes=out,
        gemm=gemm,
        collective=collective,
    )


def kernel(
    name: str, stages: list[StageProgram], calls: int = 1, looped: bool = False
) -> KernelProgram:
    """A kernel of ``stages`` called ``calls`` times per step."""
    return KernelProgram(name=name, calls=calls, looped=looped, stages=tuple(stages))


def program(
    kernels: list[KernelProgram],
    tp: int = 1,
    phase: str = "decode",
    batch: int = 1,
    tokens: int = 1,
    cache_len: int = 0,
) -> Program:
    """A Program of ``kernels`` (the placement is a token: the engine does not read it)."""
    usage = {t: TierUsage(capacity_bytes=1 << 40) for t in ("sram", "hbm", "ddr")}
    return Program(
        shape=StepShape(
            phase=phase,
            batch=batch,
            tokens=tokens,  # type: ignore[arg-type]
            cache_len=cache_len,
        ),
        tp=tp,
        kernels=tuple(kernels),
        placement=Placement(batch_slots=batch, tiers=usage),  # type: ignore[arg-type]
    )


def decoder_layer(
    prefix: str = "",
    *,
    tp: int = 1,
    hidden: int = 4096,
    inter: int = 14336,
    batch: int = 1,
    kv_bytes: float = 0.0,
    with_collectives: bool = True,
    moe_bytes: float = 0.0,
) -> list[StageProgram]:
    """A Llama-like decoder layer on one socket, batch ``batch`` decode, ~12 stages.

    Weight bytes are bf16 and split over ``tp``; two all-reduces (after attention and after
    the MLP) when ``tp > 1``; ``moe_bytes`` adds a DDR/HBM-heavy expert stage.
    """
    h, f = hidden, inter // tp
    act = 2.0 * batch * h

    def gemm_stage(
        name: str, n: int, k: int, inputs: tuple[str, ...], pcus: int = 64
    ) -> StageProgram:
        return stage(
            prefix + name,
            pcus=pcus,
            pmus=pcus,
            flops=2.0 * batch * n * k,
            hbm=2.0 * n * k,
            inputs=tuple(prefix + i for i in inputs),
            out=2.0 * batch * n,
            gemm=Gemm(batch, n, k),
        )

    coll = CollectiveSpec("allreduce", act, tp) if with_collectives and tp > 1 else None
    stages = [
        stage(
            prefix + "attn_norm",
            pcus=4,
            pmus=4,
            vector_flops=4.0 * batch * h,
            hbm=2.0 * h,
            out=act,
            op="rmsnorm",
        ),
        gemm_stage("q_proj", h // tp, h, ("attn_norm",)),
        gemm_stage("kv_proj", h // 4 // tp, h, ("attn_norm",), pcus=32),
        stage(
            prefix + "attention",
            pcus=32,
            pmus=32,
            flops=4.0 * batch * h // tp * 1024,
            vector_flops=5.0 * batch * 32 * 1024,
            hbm=kv_bytes,
            hbm_write=2.0 * batch * h / 4,
            inputs=(prefix + "q_proj", prefix + "kv_proj"),
            out=2.0 * batch * h / tp,
            op="attention",
        ),
        gemm_stage("o_proj", h, h // tp, ("attention",)),
        stage(
            prefix + "attn_allreduce",
            pcus=2,
            pmus=2,
            vector_flops=float(batch * h),
            inputs=(prefix + "o_proj",),
            out=act,
            collective=coll,
            op="allreduce",
        ),
        stage(
            prefix + "mlp_norm",
            pcus=4,
            pmus=4,
            vector_flops=4.0 * batch * h,
            hbm=2.0 * h,
            inputs=(prefix + "attn_allreduce",),
            out=act,
            op="rmsnorm",
        ),
        gemm_stage("gate_up", 2 * f, h, ("mlp_norm",), pcus=128),
        stage(
            prefix + "silu_mul",
            pcus=8,
            pmus=8,
            vector_flops=6.0 * batch * f,
            inputs=(prefix + "gate_up",),
            out=2.0 * batch * f,
            op="silu",
        ),
        gemm_stage("down", h, f, ("silu_mul",), pcus=96),
    ]
    last = "down"
    if moe_bytes:
        stages.append(
            stage(
                prefix + "experts",
                pcus=96,
                pmus=96,
                flops=2.0 * batch * moe_bytes / 2,
                hbm=moe_bytes,
                inputs=(prefix + "down",),
                out=act,
                gemm=Gemm(batch, 2048, 7168),
            )
        )
        last = "experts"
    stages.append(
        stage(
            prefix + "mlp_allreduce",
            pcus=2,
            pmus=2,
            vector_flops=float(batch * h),
            inputs=(prefix + last,),
            out=act,
            collective=coll,
            op="allreduce",
        )
    )
    return stages


def llama_like_program(
    *, layers: int = 32, tp: int = 1, batch: int = 1, looped: bool = True
) -> Program:
    """An 8B-like decode step: embedding, ``layers`` decoder layers, LM head."""
    return program(
        [
            kernel(
                "embedding",
                [
                    stage(
                        "embed",
                        pcus=2,
                        pmus=2,
                        hbm=2.0 * 4096 * batch,
                        out=2.0 * 4096 * batch,
                        op="embedding",
                    )
                ],
            ),
            kernel(
                "decoder",
                decoder_layer(tp=tp, batch=batch, kv_bytes=2.0 * 1024 * 1024),
                calls=layers,
                looped=looped,
            ),
            kernel(
                "lm_head",
                [
                    stage(
                        "lm_head",
                        pcus=256,
                        pmus=256,
                        flops=2.0 * batch * 128256 * 4096 / tp,
                        hbm=2.0 * 128256 * 4096 / tp,
                        gemm=Gemm(batch, 128256 // tp, 4096),
                    )
                ],
            ),
        ],
        tp=tp,
        batch=batch,
    )


def deepseek_like_program(*, tp: int = 16, batch: int = 32) -> Program:
    """A DeepSeek-R1-sized decode step on ``tp`` sockets: 3 dense + 58 MoE layers, ~24 stages.

    Only the shape of the work matters here (stage count, bytes, collectives), for the event
    budget and the speed benchmark; the compiler produces the real Program.
    """

    def layer(moe: bool) -> list[StageProgram]:
        a = decoder_layer(
            "a.",
            tp=tp,
            hidden=7168,
            inter=18432,
            batch=batch,
            kv_bytes=2.0 * 576 * 8192 * batch / tp,
        )
        b = decoder_layer(
            "b.",
            tp=tp,
            hidden=7168,
            inter=18432 if not moe else 2048 * 8,
            batch=batch,
            moe_bytes=(2.0 * 3 * 7168 * 2048 * 256 / tp if moe else 0),
        )
        a_last = a[-1].name
        b = [s if s.inputs else StageProgram(**{**s.__dict__, "inputs": (a_last,)}) for s in b]
        return a + b

    return program(
        [
            kernel(
                "embedding",
                [
                    stage(
                        "embed",
                        pcus=2,
                        pmus=2,
                        hbm=2.0 * 7168 * batch,
                        out=2.0 * 7168 * batch,
                        op="embedding",
                    )
                ],
            ),
            kernel("decoder_dense", layer(False), calls=3, looped=True),
            kernel("decoder_moe", layer(True), calls=58, looped=True),
            kernel(
                "lm_head",
                [
                    stage(
                        "lm_head",
                        pcus=256,
                        pmus=256,
                        flops=2.0 * batch * 129280 * 7168 / tp,
                        hbm=2.0 * 129280 * 7168 / tp,
                        gemm=Gemm(batch, 129280 // tp, 7168),
                    )
                ],
            ),
        ],
        tp=tp,
        batch=batch,
    )


def test_builders_make_valid_programs() -> None:
    p = deepseek_like_program()
    moe = p.kernels[2]
    assert 20 <= len(moe.stages) <= 30
    names = [s.name for s in moe.stages]
    assert len(set(names)) == len(names)
    for i, s in enumerate(moe.stages):
        assert all(x in names[:i] for x in s.inputs)
    assert 14e9 < llama_like_program().bytes_by_tier()["hbm"] < 16e9


def test_hardware_zeroes_overheads_and_applies_edits() -> None:
    hw = hardware(**{"system.collective_chunks": 1})
    assert hw.socket.hbm.latency == 0 and hw.socket.kernel.sync == 0
    assert hw.system.collective_chunks == 1
    assert hardware(zero=False).socket.kernel.sync > 0
