"""Long-running asyncio runtimes (aiohttp apps): the node agent, later the queue and advisor."""
