"""FLTest's test Flower App: a ServerApp that writes ``final_model.npz``, ClientApps that read ``data-path``."""
