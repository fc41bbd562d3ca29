"""Package discovery that pyproject.toml cannot express: the service.* packages plus the folders
mapped in from the repository's top (``package-dir`` in pyproject.toml), each subfolder listed so
setuptools installs it as part of the package rather than warning about it."""

from setuptools import find_namespace_packages, find_packages, setup


def mapped(package: str, folder: str) -> list[str]:
    subfolders = find_namespace_packages(where=folder, exclude=["*__pycache__*"])
    return [package, *(f"{package}.{sub}" for sub in subfolders)]


setup(packages=[*find_packages(include=["service", "service.*"]),
                *mapped("service._sql", "sql"), *mapped("service._migrations", "migrations"),
                *mapped("pgcontext_client", "client/pgcontext_client")])
