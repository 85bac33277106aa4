"""The memo of a policy's answers about prompts (serving.prompt_facts.PromptFacts) gives what the
policy gives: a decode run's last cache counted on from its first equals ``cache_at`` (or both
refuse) for every registered policy, and ``cache_at`` refuses a prompt below one token."""

from __future__ import annotations

import itertools

import pytest

from rdu_sim.config.workload import KVConfig
from rdu_sim.kv import make_policy
from rdu_sim.kv.policies import policy_names
from rdu_sim.kv.policy import KVPolicy
from rdu_sim.serving.prompt_facts import PromptFacts


def policies() -> list[tuple[str, KVPolicy]]:
    made = []
    for name, max_context, budget, page in itertools.product(
        policy_names(), (64, 300), (None, 16, 100, 5000), (None, 16)
    ):
        config = {
            "policy": name,
            "min_bucket": 16,
            **({} if budget is None else {"budget": budget}),
        }
        try:
            policy = make_policy(KVConfig.model_validate(config), max_context, page)
        except (ValueError, TypeError):
            continue  # a budget the policy refuses for this context
        made.append((f"{name}-{max_context}-{budget}-{page}", policy))
    return made


POLICIES = policies()


def answer(ask: object, *args: int) -> object:
    try:
        return ask(*args)  # type: ignore[operator]
    except ValueError:
        return "refused"


@pytest.mark.parametrize(("label", "policy"), POLICIES, ids=[label for label, _ in POLICIES])
def test_a_run_s_last_cache_counted_on_is_the_policy_s(label: str, policy: KVPolicy) -> None:
    max_context = policy.max_context
    facts = PromptFacts(policy, max_context, None)
    checked = 0
    for prompt in (*range(1, 40), max_context - 1, max_context):
        try:
            first = facts.first_cache(prompt)
        except ValueError:
            continue  # the scheduler never counts on from a first cache that does not fit
        for steps in range(0, max_context + 5, 7):
            want = answer(policy.cache_at, prompt, steps)
            got = answer(facts.last_cache, prompt, first, steps)
            assert got == want, (label, prompt, steps)
            checked += 1
    assert checked > 0, label


@pytest.mark.parametrize("name", policy_names())
def test_cache_at_refuses_a_prompt_below_one_token(name: str) -> None:
    policy = make_policy(KVConfig.model_validate({"policy": name, "min_bucket": 256}), 4096)
    for prompt in (0, 0.5, -3):
        with pytest.raises(ValueError, match="must be >= 1"):
            policy.cache_at(prompt, 1)  # type: ignore[arg-type]
    assert policy.cache_at(1, 0) >= 1
