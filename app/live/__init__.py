"""The live path: committed events and token deltas to open streams, on every replica.

The runtime's contract for it is `app.runtime.ports.LiveDelivery` (with `LiveBus` around
it); `bus.EventBus` implements it. This package reads the store (catch-up) and listens to
its announcements (`app.store.announce`); the store never imports it.
"""
