"""Long-running asyncio runtimes (aiohttp apps): the node agent, the queue exporter, the advisor;
and `apply`, which carries advice out on the scheduler."""
