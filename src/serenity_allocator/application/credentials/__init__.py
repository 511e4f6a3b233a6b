"""A request's user authority in IMS mode, as the Allocator's use cases need it.

- :mod:`.request_credentials`: exchange first, bind, admit coalesced members by their own users,
  invalidate and scrub at the end; with the credential broker and session ports the adapters
  implement.
"""
