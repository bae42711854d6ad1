#!/usr/bin/env python3
"""Verify a Loop Engine receipt's DSSE signature with an independent
implementation (securesystemslib). Usage: dsse-verify.py RECEIPT KEYID PUBHEX
Exits 0 when the envelope verifies with the given Ed25519 key, 1 otherwise."""
import json
import sys

from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

receipt, keyid, pubhex = sys.argv[1:4]
with open(receipt) as f:
    envelope = Envelope.from_dict(json.load(f))
key = SSlibKey(keyid, "ed25519", "ed25519", {"public": pubhex})
try:
    envelope.verify([key], 1)
except Exception as e:  # securesystemslib raises VerificationError
    print(f"securesystemslib: does not verify: {e}")
    sys.exit(1)
print(f"securesystemslib: verified by {keyid}")
