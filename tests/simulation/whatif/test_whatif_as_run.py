"""Which order replays the site's own scheduler (simulation/whatif/as_run.py
``choose_as_run``): an order given wins, else the reported ``SchedulerType``'s, else the
fallback, and the document says which."""

from __future__ import annotations

from gpuadvisor.config.whatif import WHATIF_CHOICES, WhatifSettings
from gpuadvisor.model.scheduler import SchedulerConfig
from gpuadvisor.simulation.whatif.as_run import (
    AUTO,
    FALLBACK_ORDER,
    FALLBACK_ORDERS,
    SCHEDULER_ORDERS,
    choose_as_run,
)

INFO = "gpuadvisor_queue_scheduler_info"


def scheduler(kind: str) -> SchedulerConfig:
    return SchedulerConfig(kind, "bf_window=4320", "select/cons_tres", "priority/multifactor")


def test_the_default_is_auto_and_every_mapped_order_is_a_choice() -> None:
    assert WhatifSettings().as_run == AUTO
    assert {AUTO, FALLBACK_ORDER, *SCHEDULER_ORDERS.values()} <= set(WHATIF_CHOICES["as_run"])


def test_the_reported_scheduler_chooses_the_order() -> None:
    backfill = choose_as_run(AUTO, scheduler("sched/backfill"), INFO)
    assert (backfill.order, backfill.origin) == ("easy", f"{INFO}: sched/backfill")
    builtin = choose_as_run(AUTO, scheduler("sched/builtin"), INFO)
    assert (builtin.order, builtin.origin, builtin.warning) == (
        "fifo",
        f"{INFO}: sched/builtin",
        "",
    )
    assert builtin.document() == {
        "order": "fifo",
        "from": f"{INFO}: sched/builtin",
        "scheduler": {
            "scheduler_type": "sched/builtin",
            "scheduler_parameters": "bf_window=4320",
            "select_type": "select/cons_tres",
            "priority_type": "priority/multifactor",
            "preempt_type": "",
            "preempt_mode": "",
        },
        "warning": None,
    }


def test_an_order_given_wins_over_the_reported_scheduler() -> None:
    chosen = choose_as_run("conservative", scheduler("sched/builtin"), INFO)
    assert (chosen.order, chosen.origin, chosen.warning) == ("conservative", "--as-run", "")


def test_an_unknown_scheduler_is_replayed_as_easy_with_a_warning_naming_it() -> None:
    chosen = choose_as_run(AUTO, scheduler("sched/wiki2"), INFO)
    assert (chosen.order, chosen.origin) == ("easy", f"{INFO}: sched/wiki2")
    assert "'sched/wiki2'" in chosen.warning and "give --as-run" in chosen.warning
    assert chosen.document()["warning"] == chosen.warning


def test_no_scheduler_reported_is_the_default_saying_why() -> None:
    chosen = choose_as_run(AUTO, None, "", missing=f"no {INFO} sample in the window")
    assert chosen.document() == {
        "order": "easy",
        "from": f"default: no {INFO} sample in the window",
        "scheduler": None,
        "warning": None,
    }


def test_an_unknown_scheduler_is_replayed_as_the_fallback_given() -> None:
    """The profile's fallback (kube-scheduler's fifo-skip), not Slurm's easy: review 3 §1.3
    found ``choose_as_run`` ignoring its own ``fallback`` for an unmatched scheduler."""
    fallback = FALLBACK_ORDERS["kubernetes"]
    chosen = choose_as_run(AUTO, scheduler("sched/wiki2"), INFO, fallback=fallback)
    assert chosen.order == fallback != FALLBACK_ORDER
    assert f"replayed as {fallback} " in chosen.warning
    assert choose_as_run(AUTO, None, "", fallback=fallback).order == fallback
