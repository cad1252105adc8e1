"""The authoring contract shared by every layer.

`schemas` is the one package every other package may import (docs/architecture.md,
'Packages and the dependency direction'): the JSON Schema of
workflow documents, the typed definitions parsed from them, the `{{ }}` expression language,
the error tree and the injectable clock.
"""
