"""The URLs of the Accelerator Capacity panel."""
from django.urls import re_path

from cyborg.dashboard.admin.accelerator_capacity import views

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
]
