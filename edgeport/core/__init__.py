"""One runner per artifact kind, same interface: ``load(path, threads) -> Runner``; ``Runner.run(inputs) -> outputs``."""
