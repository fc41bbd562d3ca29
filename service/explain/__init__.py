"""The explain page: ``/explain`` shows why each memory was packed or dropped, and how search ranked.

Static HTML, JavaScript and CSS shipped in this package (no CDN, no build step). The page calls the
public API from the browser with the key the user types in, which it keeps in ``sessionStorage``
only (gone when the tab closes); the service itself serves the files without authentication, as
they hold no data.
"""

from service.explain.handlers import explain_routes

__all__ = ["explain_routes"]
