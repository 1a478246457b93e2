"""Routes of the Accelerator Requests panel."""
from django.urls import re_path

from cyborg.dashboard.project.accelerator_requests import views

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    re_path(r'^(?P<uuid>[^/]+)/$', views.DetailView.as_view(),
            name='detail'),
]
