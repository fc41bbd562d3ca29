"""Package discovery that pyproject.toml cannot express: the service.* packages plus the folders
mapped in from the repository's top (``package-dir`` in pyproject.toml), each subfolder listed so
setuptools installs it as part of the package rather than warning about it. Folders of data files
inside ``service`` (``service/explain/static``) are packages too, found as namespace packages, with
their files listed in ``package-data``."""

from setuptools import find_namespace_packages, setup


def mapped(package: str, folder: str) -> list[str]:
    subfolders = find_namespace_packages(where=folder, exclude=["*__pycache__*"])
    return [package, *(f"{package}.{sub}" for sub in subfolders)]


setup(packages=[*find_namespace_packages(include=["service", "service.*"], exclude=["*__pycache__*"]),
                *mapped("service._sql", "sql"), *mapped("service._migrations", "migrations"),
                *mapped("pgcontext_client", "client/pgcontext_client")])
