"""Webhooks: subscriptions, Standard Webhooks signing, SSRF-checked delivery.

- `records`: the records and the store protocol the webhook verbs need;
- `service`: `Webhooks`, the verbs the API calls (create, list, get, update, delete, the
  delivery log, redeliver);
- `signing`: Standard Webhooks secrets and signatures;
- `targets`: which URLs and addresses a delivery may go to (SSRF);
- `delivery`: `Deliverer`, each replica's worker that claims due deliveries from the outbox
  and sends them, with retries and backoff; a subscription's `format` other than the
  standard envelope is rendered by a `Renderer` an API gives at assembly (A2A's push
  notifications).
"""
