"""Arch-neutral kernel building blocks: stage arithmetic, mbarrier rings, tile scheduler."""
