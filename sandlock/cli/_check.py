"""`sandlock check`: what the kernel offers and what sandlock will use."""

from __future__ import annotations

from ..kernel import probe, protection_level


def main() -> int:
    features = probe()
    width = max(len(f.name) for f in features)
    print(f"{'feature':<{width}}  {'status':<7}  {'kernel':<26}  sandlock uses it for")
    for feature in features:
        status = "ok" if feature.available else ("MISSING" if feature.required else "absent")
        print(f"{feature.name:<{width}}  {status:<7}  {feature.detail:<26}  {feature.use}")
    level, meaning = protection_level(features)
    print(f"\nprotection level: {level} ({meaning})")
    missing = [f.name for f in features if f.required and not f.available]
    if missing:
        print(f"sandlock run cannot confine commands here: missing {', '.join(missing)}")
        return 1
    print("\nall required features are present")
    return 0
