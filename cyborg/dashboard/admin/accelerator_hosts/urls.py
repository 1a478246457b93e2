"""The URLs of the Accelerator Hosts panel."""
from django.urls import re_path

from cyborg.dashboard.admin.accelerator_hosts import views

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    # A host name: letters, digits, dots, dashes, underscores.
    re_path(r'^(?P<host>[\w.-]+)/$', views.DetailView.as_view(),
            name='detail'),
]
