"""Routes of the Device Profiles panel."""
from django.urls import re_path

from cyborg.dashboard.project.device_profiles import views

urlpatterns = [
    re_path(r'^$', views.IndexView.as_view(), name='index'),
    re_path(r'^create/$', views.CreateView.as_view(), name='create'),
    re_path(r'^(?P<uuid>[^/]+)/$', views.DetailView.as_view(),
            name='detail'),
]
