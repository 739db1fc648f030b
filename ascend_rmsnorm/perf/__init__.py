"""The performance model of the kernels (``ascend-rmsnorm bench --model``), a library in modules:
``params`` (latency parameters and presets), ``soc`` (core counts, HBM peaks), ``results`` (records),
``kernel`` (the hooked emu build), ``model`` (record and replay), ``notes`` (the leaf the backends use),
``calibrate`` (the calibration kernels' runners and the fit behind ``bench --calibrate``)."""
