"""Device kernels: one module per architecture, shared building blocks in ``common``."""
