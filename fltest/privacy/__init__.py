"""Privacy of the clients' changes, the reference's way (the config: :mod:`fltest.config.privacy`).

- :mod:`fltest.privacy.clipping`: a client's change clipped to an L2 norm;
- :mod:`fltest.privacy.noise`: the Gaussian noise, drawn from the experiment's seed and the round;
- :mod:`fltest.privacy.averaging`: DP-FedAvg's server step, fixed and adaptive clipping, from the papers;
- :mod:`fltest.privacy.local`: local differential privacy, each client noising what it sends;
- :mod:`fltest.privacy.sharing`: clients sharing part of their change (a percentile of it, or some parameters not);
- :mod:`fltest.privacy.accounting`: the privacy spent, ε at the config's δ.
"""
