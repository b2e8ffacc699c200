"""Model validation: NVIDIA's published rows through the FLOPs, memory and time models (``published_check``,
``published_points``, ``published_models``), the time model's calibration rows and fit (``time_calibration``),
Megatron-LM's golden runs (``golden``), the published ablations (``ablations``, ``ablation_time``), where their data
lives (``data``) and the one set of figures they are judged by (``metrics``). Above ``model`` / ``config`` and the
results store, below ``cli``."""
