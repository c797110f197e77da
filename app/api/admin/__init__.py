"""The operators' API (`/v1/admin/...`): tenant erasure and the erasure receipts.

Its routes take the operators' token (`ASR_ADMIN_TOKEN`), never a tenant's key; without the
setting they answer 404 `admin_disabled`. It uses `http/` alone, like a protocol room.
"""
