"""Backends: one module a framework, found by the kind of run in one registry (:mod:`fltest.backends.registry`).

This package imports nothing itself: it is also the parent of the Flower deployment's ClientApp
module, which every SuperNode imports again for each message, and which must not pay for the
driver's data preparation (the datasets library) or Ray.
"""
