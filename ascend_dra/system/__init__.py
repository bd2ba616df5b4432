"""Operating-system helpers every layer may use: durable atomic file writes (:mod:`.atomicfile`),
TCP listeners and addresses (:mod:`.listen`), running until a signal (:mod:`.signals`).

May import :mod:`ascend_dra.observe` (fault injection) and nothing else of ours.
"""
