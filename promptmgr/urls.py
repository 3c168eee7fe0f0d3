from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from promptmgr import files_views, views
from promptmgr.api import api

urlpatterns = [
    path("", RedirectView.as_view(url="/projects/", permanent=False)),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("markdown/", views.markdown_preview, name="markdown_preview"),
    path("projects/", views.project_list, name="project_list"),
    path("projects/<int:project_id>/", views.project_detail, name="project_detail"),
    path("projects/<int:project_id>/files/", files_views.files_page, name="files_page"),
    path("projects/<int:project_id>/settings/", views.project_settings, name="project_settings"),
    path(
        "projects/<int:project_id>/settings/members/",
        views.project_member_add_view,
        name="project_member_add",
    ),
    path(
        "projects/<int:project_id>/settings/members/remove/",
        views.project_member_remove_view,
        name="project_member_remove",
    ),
    path(
        "projects/<int:project_id>/settings/rules/<int:rule_id>/remove/",
        views.project_rule_remove,
        name="project_rule_remove",
    ),
    path("projects/<int:project_id>/delete/", views.project_delete_view, name="project_delete"),
]
