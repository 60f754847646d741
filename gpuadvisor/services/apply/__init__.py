"""``gpuadvisor apply``'s engine: the recommendations read by ``sources.advice``, a pure plan of
what may run (``plan``), and the runner that runs and logs it (``runner``).

Safety comes from four rules, each enforced here rather than trusted to the advisor: only
``scontrol`` with an allowed subcommand (``top``; ``update JobId=…`` when the operator allows it),
run as an argument list, never through a shell; never advice past its ``valid_until``; a timeout
on every command; and one JSON line in the log for every command planned, run, skipped or refused.
"""
