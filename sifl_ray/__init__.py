"""sifl-ray: simulate privacy-preserving federated learning with System Immersion coding (SIFL) on Ray.

The coding core (``sifl_ray.coding``, ``sifl_ray.optim``, ``sifl_ray.privacy``) runs without Ray; the
protocol roles (``sifl_ray.roles``) are plain Python; ``actors`` wraps them in thin Ray shells.
"""

__version__ = "0.1.0"
