"""The run side: the run controller that receives every worker signal, the worker host, and the training worker on its thread with its tasks (open, export, save, tune kernels)."""
