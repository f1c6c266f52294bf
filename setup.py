"""Package discovery: every package under kvplan/, plus the three required top-level folders
shipped inside it (kernels/ -> kvplan.kernels, model_configs/ -> kvplan.model_configs,
hardware_profiles/ -> kvplan.hardware_profiles) with any subpackages they grow. Nothing is listed
by hand, so a new subpackage cannot silently miss the wheel; CI installs the wheel and runs every
command from outside the checkout. The rest of the metadata is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = {
    "kvplan.kernels": "kernels",
    "kvplan.model_configs": "model_configs",
    "kvplan.hardware_profiles": "hardware_profiles",
}

packages = find_packages(include=["kvplan", "kvplan.*"])
package_dir = {"kvplan": "kvplan"}
for name, folder in MAPPED.items():
    package_dir[name] = folder
    packages.append(name)
    for sub in find_packages(where=folder):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
