"""Secret values at rest (control only): the keyring and AES-GCM sealing (``sealing.py``)."""
