"""``apply``'s plan, pure: which commands pass the allow-list, and one verdict per selected
recommendation (run, expired, refused, no command), decided without running anything."""

from __future__ import annotations

from gpuadvisor.services.apply.plan import Policy, Verdict, plan, refusal
from gpuadvisor.sources.advice import Advice

NOW = 1_800_000_000.0
TOP = Policy(frozenset({"start-now", "hold-node"}))
UPDATE = Policy(TOP.kinds, allow_update=True)


def advice(
    index: int,
    *commands: tuple[str, ...],
    kind: str = "start-now",
    valid_until_s: float = NOW + 60,
    generated_at_s: float | None = NOW - 10,
) -> Advice:
    job = commands[0][2].removeprefix("JobId=") if commands else ""
    return Advice(
        index,
        f"id{index}",
        kind,
        "",
        "do it",
        commands,
        valid_until_s,
        job,
        generated_at_s=generated_at_s,
    )


def test_scontrol_top_of_one_job_is_allowed_and_nothing_else_by_default() -> None:
    assert refusal(("scontrol", "top", "4711"), TOP) == ""
    assert refusal(("scontrol", "top", "4712_3"), TOP) == ""
    assert "one job" in refusal(("scontrol", "top", "4711,4712"), TOP)  # never emitted
    assert "one job" in refusal(("scontrol", "top", "4711;reboot"), TOP)
    assert "only scontrol" in refusal(("sh", "-c", "scontrol top 1"), TOP)
    assert "not allowed (allowed: top)" in refusal(("scontrol", "cancel", "1"), TOP)
    assert "--allow-update" in refusal(("scontrol", "update", "JobId=1", "Nice=5"), TOP)


def test_scontrol_update_with_allow_update_may_set_only_the_node_list() -> None:
    assert refusal(("scontrol", "update", "JobId=1", "ReqNodeList=gpu01"), UPDATE) == ""
    assert "not 'TimeLimit=9'" in refusal(("scontrol", "update", "JobId=1", "TimeLimit=9"), UPDATE)
    assert "JobId=<job>" in refusal(("scontrol", "update", "Nice=5"), UPDATE)


def test_each_selected_recommendation_gets_one_verdict_and_others_are_counted() -> None:
    steps = plan(
        (
            advice(0, ("scontrol", "top", "5")),
            advice(1, ("scontrol", "top", "6"), valid_until_s=NOW),
            advice(2, ("scontrol", "top", "7"), ("scontrol", "cancel", "7")),
            advice(3),
            advice(4, ("scontrol", "top", "8"), kind="reclaim-idle"),
        ),
        TOP,
        NOW,
    )
    assert [(s.advice.index, s.verdict) for s in steps.steps] == [
        (0, Verdict.RUN),
        (1, Verdict.EXPIRED),
        (2, Verdict.REFUSED),
        (3, Verdict.NO_COMMAND),
    ]
    assert steps.steps[1].reason.startswith("expired at 2027-01-15T08:00:00.000Z")
    assert "cancel" in steps.steps[2].reason
    assert steps.not_selected == 1


def test_share_advice_never_runs_even_when_selected_and_carrying_a_command() -> None:
    policy = Policy(frozenset({"share"}))
    (step,) = plan((advice(0, ("scontrol", "top", "5"), kind="share"),), policy, NOW).steps
    assert step.verdict is Verdict.NO_COMMAND and "apply never acts on it" in step.reason


def test_advice_whose_document_says_no_or_a_future_generated_at_never_runs() -> None:
    """The one-hour cap rests on ``generated_at``: without it, or with one ahead of this clock,
    a saved document could be replayed at any later time (issue 17)."""
    top = ("scontrol", "top", "4711")
    cases = {
        "no generated_at": advice(0, top, generated_at_s=None),
        "in the future": advice(1, top, generated_at_s=NOW + 3600),
    }
    for why, one in cases.items():
        (step,) = plan([one], TOP, NOW).steps
        assert step.verdict is Verdict.EXPIRED, why
        assert why in step.reason
    (near,) = plan([advice(2, top, generated_at_s=NOW + 60)], TOP, NOW).steps  # clock skew
    assert near.verdict is Verdict.RUN
