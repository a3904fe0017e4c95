"""The secure aggregation protocol as two plain roles a simulation drives: :class:`SecAggClient` and
:class:`SecAggServer` (Bonawitz et al., CCS 2017, Fig. 4, semi-honest variant; SecAgg+ graph of Bell et al.).

One round, with U1 ⊇ U2 ⊇ U3 ⊇ U4 the clients still present after each step:

0. **Advertise keys.** Each client sends two X25519 public keys, ``c`` (to encrypt shares) and ``s`` (to
   agree on masks); the server forwards to each client those of its neighbours in U1.
1. **Share keys.** Each client in U1 draws a self-mask seed ``b_i`` and Shamir-shares (threshold t) both
   ``b_i`` and its private key ``s_i`` among its closed neighbourhood in U1; each share travels
   AES-GCM-encrypted under a key agreed with ``c``, so the server routes shares it cannot read. U2: the
   clients whose shares arrived.
2. **Masked input.** Each client in U2 uploads
   ``y_i = x_i + PRG(b_i) + Σ_{j ∈ N(i) ∩ U2} ±PRG(s_ij) mod 2^k``, ``+`` for ``i < j`` and ``−`` for
   ``i > j``, so every pairwise mask appears once with each sign in the sum. U3: the clients whose ``y_i``
   arrived; the server announces U3.
3. **Unmask.** Each client in U4 ⊆ U3 reveals, for each j whose shares it holds, the share of ``b_j`` if j is
   in U3 and the share of ``s_j`` if j dropped (in U2 ∖ U3), never both. The server reconstructs, removes
   ``PRG(b_j)`` for j in U3 and, with ``s_j`` and the public keys, the masks the survivors added for dropped
   j; the result is ``Σ_{i ∈ U3} x_i mod 2^k``, exact.

A client that drops at any step costs nothing as long as each closed neighbourhood that matters keeps t
responders (:func:`recovery_problems`); with the complete graph that is ``|U4| ≥ t``, so up to N − t dropouts.

What is not modelled: the signatures and consistency round that protect against an *active* server
(Bonawitz §4.2 / Fig. 4's round 3), and the network. The trust boundary is the object: each party's
secrets live only in its own object; the server holds public keys, ciphertexts it routes, masked vectors and
the shares it is sent, and it reconstructs a dropped client's key (as the protocol intends) only inside
:meth:`SecAggServer.unmask`, never keeping it.

Costs are counted per party (:class:`PartyStats`): bytes are what would cross the network (public keys 32
bytes each, client ids 4 bytes, shares 66 bytes, AES-GCM ciphertexts with their 16-byte tag, masked vectors
packed at k bits per element), messages are one per step per direction, and compute is the wall time inside
each party's methods.

Where each part lives: the public parameters in :mod:`.params`, the client's half in :mod:`.client`, the
server's half (and :func:`recovery_problems`, :class:`MaskPlan`) in :mod:`.server`, the messages in
:mod:`.messages`; this module names them together.
"""

from sifl_ray.privacy.secagg.client import SecAggClient
from sifl_ray.privacy.secagg.messages import (
    ID_BYTES,
    MaskedInput,
    PartyStats,
    PublicKeys,
    SecAggError,
    UnmaskResponse,
)
from sifl_ray.privacy.secagg.params import SecAggParams
from sifl_ray.privacy.secagg.server import MaskPlan, SecAggServer, recovery_problems

__all__ = [
    "ID_BYTES",
    "MaskPlan",
    "MaskedInput",
    "PartyStats",
    "PublicKeys",
    "SecAggClient",
    "SecAggError",
    "SecAggParams",
    "SecAggServer",
    "UnmaskResponse",
    "recovery_problems",
]
