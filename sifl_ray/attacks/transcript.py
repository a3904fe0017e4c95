"""What each party saw: the transcripts the adversaries work on (docs/method.md "Attacks the design must be
judged against").

An attack is only as honest as its input. A :class:`TranscriptRecorder` stores exactly what travels on the
wire, channel by channel, nothing of the plain models or keys:

* client → aggregator: every client upload ``w~_i`` of every round (with its FedAvg weight). By docs/method.md
  "Parties" this is the aggregator's whole view: it sees only encoded local models;
* server → clients: the broadcasts (M1: ``w~^t``; M2: ``W'``). docs/method.md "Parties" does *not* give these
  to the aggregator. An attack that uses them models a stronger adversary, the aggregator plus an eavesdropper
  on the server → client channel or plus a colluding client (every client receives the broadcast), and the
  suite labels it so (``suite.AGGREGATOR_BROADCASTS``);
* aggregator → server: what the server receives (M1: the average ``w~_a``; M2: ``W'_a``, ñ×p, the M2
  server's whole view).

The platform's parties fill it (:mod:`sifl_ray.attacks.record`: the client workers' ``recorder`` hook, the
server's inputs, the broadcasts the driver holds). The plain models the adversaries are scored against are
kept elsewhere (``record.GroundTruth``), and so is
every seed: the run seed drives data, initial model, minibatches and noise, so whoever held it beside a
transcript could re-run training and read the plain models without any key. A saved transcript therefore
holds no seed, and can be handed to an analyst without leaking the answer.

Size is bounded by ``max_coordinates``: when the encoded length ñ exceeds it, the recorder keeps a fixed
random subset of coordinates, chosen once and the same for every vector, and stores the subset itself. It is
drawn from fresh OS entropy unless a ``seed`` is given (tests): a subset drawn from the run seed would let a
reader search small seeds until the subset matches, and so recover the run seed. That subset is enough for
offline inspection of large models but not for the subspace attacks, which need whole vectors; those refuse
a subsampled transcript (:meth:`TranscriptRecorder.require_full`). ``describe()`` says which case applies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sifl_ray.seeding import numpy_generator

FORMAT = "sifl_ray.attacks.Transcript/1"


def _as_float64(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.array(x, dtype=np.float64, copy=True)


@dataclass
class TranscriptRecorder:
    """Records the traffic of each channel (uploads, broadcasts, server inputs), round by round.

    Args:
        max_coordinates: keep whole vectors up to this encoded length; above it, keep a fixed random subset of
            this many coordinates (``None``: always whole vectors).
        seed: where the coordinate subset comes from: ``None`` (default) draws it from fresh OS entropy; an
            integer draws it from the stream ``(seed, "transcript", "coordinates")`` (reproducible: tests).
            Never pass the run seed, and never written to a saved transcript (the subset itself is).
    """

    max_coordinates: int | None = None
    seed: int | None = None
    n_tilde: int | None = None
    coordinates: np.ndarray | None = None
    uploads: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)
    weights: dict[int, float] = field(default_factory=dict)
    broadcasts: dict[int, np.ndarray] = field(default_factory=dict)
    server_inputs: dict[int, np.ndarray] = field(default_factory=dict)
    key_epochs: dict[int, int] = field(default_factory=dict)

    # -- recording (the platform's calls) ---------------------------------------------------------------

    def record_upload(
        self, round: int, client_id: int, w_tilde: torch.Tensor | np.ndarray, weight: float | None = None
    ) -> None:
        """Client ``client_id``'s upload ``w~_i`` of round ``round`` (ñ,), as the aggregator receives it.

        ``weight`` is the client's FedAvg weight ``|D_i|`` (or ``|D_i|/|D|``): the aggregator needs it to
        average, so it is part of its view. Unrecorded weights count as equal.
        """
        self.uploads.setdefault(int(round), {})[int(client_id)] = self._keep(w_tilde, what="upload")
        if weight is not None:
            self.weights[int(client_id)] = float(weight)

    def record_broadcast(self, round: int, x: torch.Tensor | np.ndarray) -> None:
        """The encoded global model every client receives at the start of round ``round``: M1's ``w~^t``
        (ñ,) or M2's ``W'`` (ñ, p). Server → client traffic: not part of the aggregator's own view."""
        self.broadcasts[int(round)] = self._keep(x, what="broadcast")

    def record_weights(self, weights: dict[int, float]) -> None:
        """Every client's FedAvg weight ``|D_i|`` (client id → weight): the aggregator's to know, each partial
        sum it reduces carries its weight."""
        self.weights.update({int(c): float(w) for c, w in weights.items()})

    def record_server_input(self, round: int, W: torch.Tensor | np.ndarray) -> None:
        """What the server received in round ``round``: M1's average ``w~_a`` (ñ,), M2's ``W'_a`` (ñ, p)."""
        self.server_inputs[int(round)] = self._keep(W, what="server input")

    def record_key_epoch(self, round: int, epoch: int) -> None:
        """The server key's epoch from round ``round`` on (re-keying is announced, so it is public)."""
        self.key_epochs[int(round)] = int(epoch)

    def _keep(self, x: torch.Tensor | np.ndarray, *, what: str) -> np.ndarray:
        arr = _as_float64(x)
        if arr.ndim not in (1, 2):
            raise ValueError(f"a {what} must be a vector (ñ,) or a matrix (ñ, p), got shape {arr.shape}")
        length = arr.shape[0]
        if self.n_tilde is None:
            self.n_tilde = length
            if self.max_coordinates is not None and length > self.max_coordinates:
                rng = (
                    np.random.default_rng()  # fresh OS entropy: the subset must not reveal any seed
                    if self.seed is None
                    else numpy_generator(self.seed, "transcript", "coordinates")
                )
                self.coordinates = np.sort(rng.choice(length, size=self.max_coordinates, replace=False))
        elif length != self.n_tilde:
            raise ValueError(
                f"a {what} has {length} encoded coordinates but this transcript holds vectors of length "
                f"{self.n_tilde}; use one recorder per run (and per model)"
            )
        return arr if self.coordinates is None else arr[self.coordinates]

    # -- reading (the adversaries' calls) ---------------------------------------------------------------

    @property
    def subsampled(self) -> bool:
        return self.coordinates is not None

    def require_full(self, attack: str) -> None:
        """Raise if the transcript keeps only a subset of coordinates: ``attack`` needs whole vectors."""
        if self.subsampled:
            raise ValueError(
                f"{attack} needs whole encoded vectors, but this transcript keeps {self.max_coordinates} of "
                f"{self.n_tilde} coordinates; record a smaller model or raise max_coordinates"
            )

    def rounds(self) -> list[int]:
        """Rounds with at least one upload, in order."""
        return sorted(self.uploads)

    def upload_matrix(self, round: int) -> tuple[np.ndarray, list[int]]:
        """Round ``round``'s uploads as columns of an (ñ, N_c) matrix, and the client ids in column order."""
        clients = sorted(self.uploads[round])
        return np.stack([self.uploads[round][c] for c in clients], axis=1), clients

    def client_weights(self, clients: list[int]) -> np.ndarray:
        """FedAvg weights of ``clients``, normalised to sum to 1 (equal where unrecorded)."""
        w = np.array([self.weights.get(c, 1.0) for c in clients], dtype=np.float64)
        return w / w.sum()

    def epoch_of(self, round: int) -> int:
        """The key epoch in force at ``round`` (the last announced one; 0 before any)."""
        started = [r for r in self.key_epochs if r <= round]
        return self.key_epochs[max(started)] if started else 0

    def describe(self) -> str:
        """One sentence for reports: what was recorded and whether vectors are whole or subsampled."""
        n_up = sum(len(v) for v in self.uploads.values())
        what = (
            f"whole vectors (ñ = {self.n_tilde})"
            if not self.subsampled
            else f"a fixed random subset of {len(self.coordinates)} of ñ = {self.n_tilde} coordinates, "
            f"drawn once, stored with the transcript"
        )
        return (
            f"{n_up} uploads over {len(self.uploads)} rounds, {len(self.broadcasts)} broadcasts, "
            f"{len(self.server_inputs)} server inputs; {what}"
        )

    # -- persistence ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """A flat dict of NumPy arrays and one JSON metadata string (``save`` writes it as ``.npz``).

        No seed: the coordinate subset is stored as ``coordinates``, and a seed of the run would reproduce the
        plain models (see the module docstring).
        """
        meta = {
            "format": FORMAT,
            "max_coordinates": self.max_coordinates,
            "n_tilde": self.n_tilde,
            "weights": {str(k): v for k, v in self.weights.items()},
            "key_epochs": {str(k): v for k, v in self.key_epochs.items()},
        }
        out: dict[str, object] = {"meta": json.dumps(meta)}
        if self.coordinates is not None:
            out["coordinates"] = self.coordinates
        for r, by_client in self.uploads.items():
            for c, x in by_client.items():
                out[f"upload/{r}/{c}"] = x
        for r, x in self.broadcasts.items():
            out[f"broadcast/{r}"] = x
        for r, x in self.server_inputs.items():
            out[f"server_input/{r}"] = x
        return out

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> TranscriptRecorder:
        """Inverse of :meth:`to_dict`."""
        meta = json.loads(str(data["meta"]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"not a transcript of format {FORMAT!r}: got {meta.get('format')!r}")
        rec = cls(max_coordinates=meta["max_coordinates"])
        rec.n_tilde = meta["n_tilde"]
        rec.weights = {int(k): float(v) for k, v in meta["weights"].items()}
        rec.key_epochs = {int(k): int(v) for k, v in meta["key_epochs"].items()}
        if "coordinates" in data:
            rec.coordinates = np.asarray(data["coordinates"], dtype=np.int64)
        for name, value in data.items():
            parts = name.split("/")
            arr = np.asarray(value, dtype=np.float64) if parts[0] != "meta" else None
            if parts[0] == "upload":
                rec.uploads.setdefault(int(parts[1]), {})[int(parts[2])] = arr
            elif parts[0] == "broadcast":
                rec.broadcasts[int(parts[1])] = arr
            elif parts[0] == "server_input":
                rec.server_inputs[int(parts[1])] = arr
        return rec

    def save(self, path: str | Path) -> Path:
        """Write a compressed ``.npz`` (no pickles: safe to load from an untrusted source)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {k: (np.array(v) if isinstance(v, str) else v) for k, v in self.to_dict().items()}
        with path.open("wb") as fh:
            np.savez_compressed(fh, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> TranscriptRecorder:
        """Read a transcript written by :meth:`save`."""
        with np.load(Path(path), allow_pickle=False) as data:
            return cls.from_dict({k: (str(data[k]) if k == "meta" else data[k]) for k in data.files})
