"""The middle of the house: the backend contract and its registry, descs lowered to kernel layouts, and the one
cache of plans. Imports ``ops`` and the DirectML rules below it, never a front-end or a backend."""
