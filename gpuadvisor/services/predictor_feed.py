"""The advisor's runtime predictor, learned from the history file and learned again when the file
changes (docs/advisor.md, "Runtime predictions").

Each cycle asks ``predictor(now_s)``: an unchanged file costs one ``stat``; a changed one is read,
parsed and learned on a worker thread (``analysis.runtime_learning.learn``), then replaces the
predictor.
A file that cannot be read or parsed keeps the last good predictor (none before the first good
read: the advice then plans with time limits), logs why once, and sets
``gpuadvisor_advisor_prediction_history_up`` to 0 (so does a file that is not sacct output, or
nests its JSON too deep: an ``InputError``, never a traceback). Records of a good file that
cannot be read (a ``--parsable2`` line forged by a job name…) are left out, counted in
``gpuadvisor_advisor_prediction_history_skipped_records_total{reason}``, and said in one log line
per read, with where the first of them was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gpuadvisor.analysis.prediction import RuntimePredictor
from gpuadvisor.analysis.runtime_learning import Learned, learn
from gpuadvisor.errors import InputError
from gpuadvisor.model.accounting import AccountingRecord
from gpuadvisor.sinks.exposition.prediction import PredictionMetrics
from gpuadvisor.sources.slurm.sacct_file import HistorySettings, SacctFile

log = logging.getLogger(__name__)


class PredictorFeed:
    """The predictor from ``settings.sacct_file``; ``metrics`` counts its reads."""

    def __init__(
        self,
        settings: HistorySettings,
        metrics: PredictionMetrics,
        *,
        clock: Callable[[], float],
    ) -> None:
        if not settings.sacct_file:
            raise ValueError("a history feed needs history.sacct_file")
        self.settings = settings
        self.metrics = metrics
        self._file = SacctFile(
            settings.sacct_file, max_bytes=settings.max_bytes, limits=settings.limits
        )
        self._clock = clock
        self._learned: Learned | None = None
        self._problem = ""

    @property
    def learned(self) -> Learned | None:
        """What the last good read taught (None before one)."""
        return self._learned

    def _load(self, now_s: float) -> tuple[Learned, AccountingRecord]:
        result = self._file.read()
        return learn(result.jobs, now_s=now_s, last=self.settings.last), result

    async def predictor(self, now_s: float) -> RuntimePredictor | None:
        """The predictor to plan this cycle with (reading the file first if it changed)."""
        if self._file.changed():
            loop = asyncio.get_running_loop()
            try:
                learned, result = await loop.run_in_executor(None, self._load, now_s)
            except InputError as exc:
                self.metrics.read_failed()
                if str(exc) != self._problem:
                    kept = "the last good history" if self._learned else "time limits"
                    log.warning("history not read, planning with %s: %s", kept, exc)
                    self._problem = str(exc)
            else:
                self._learned = learned
                self.metrics.read_ok(learned, self._clock(), result.skipped)
                for problem in (*result.warnings, result.skipped_words()):
                    if problem:
                        log.warning("history %s: %s", self._file.path, problem)
                log.info(
                    "history read from %s: %d finished jobs learned, %d skipped",
                    self._file.path,
                    learned.jobs,
                    sum(learned.skipped.values()),
                )
                self._problem = ""
        return self._learned.predictor if self._learned is not None else None
