"""Answers keep their structure (chosen indices, labels and typed text per question).

``selected_options`` held only the indices, so the typed text had to be sliced back out of
the display string; ``answer_items`` holds ``core.questions.ItemAnswer`` per question.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def _items(apps: Any, schema_editor: Any) -> None:
    Question = apps.get_model("askuser", "Question")
    for question in Question.objects.exclude(selected_options=None):
        items = []
        for spec, selected in zip(question.questions or [], question.selected_options or [], strict=False):
            options = spec.get("options") or []
            labels = [str(options[i].get("label", "")) for i in selected if 0 <= i < len(options)]
            display = str((question.answers or {}).get(spec.get("question", ""), ""))
            chosen = ", ".join(labels)
            other = display[len(chosen) + 2 :] if labels else display
            items.append({"question": spec.get("question", ""), "selected": selected, "labels": labels, "other": other})
        question.answer_items = items
        question.save(update_fields=["answer_items"])


class Migration(migrations.Migration):
    dependencies = [("askuser", "0002_question_status_superseded")]

    operations = [
        migrations.AddField(
            model_name="question",
            name="answer_items",
            field=models.JSONField(
                blank=True, help_text="[{question, selected, labels, other}] (core.questions.ItemAnswer)", null=True
            ),
        ),
        migrations.RunPython(_items, migrations.RunPython.noop),
        migrations.RemoveField(model_name="question", name="selected_options"),
    ]
