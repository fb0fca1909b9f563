"""The regression issue form: its YAML (``regression.yml``) and the exact reader of a body
GitHub rendered from it."""

from __future__ import annotations

from vllm_bisect.triage.form.apply import free_text_view, read_form
from vllm_bisect.triage.form.fields import LABELS, Field, form_yaml
from vllm_bisect.triage.form.split import FormBody, split_form

__all__ = ["LABELS", "Field", "FormBody", "form_yaml", "free_text_view", "read_form",
           "split_form"]
