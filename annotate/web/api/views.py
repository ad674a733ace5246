"""The labeling side's REST API, for scripts: read the pool and labels, take data out.

Every list is paginated, ordered and filterable only on the fields named in its allowlist.
"""
from typing import TYPE_CHECKING, Any

from django.db.models import Count, Q, QuerySet
from django.http import FileResponse, Http404, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework import serializers as drf_serializers
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotate.labeling import reviewing, roles
from annotate.labeling.roles import project_of
from annotate.models import (
    Annotation,
    ExportJob,
    FinishReason,
    Generation,
    ImportJob,
    Problem,
    Project,
    QueueItem,
    Solution,
)
from annotate.pool import exporting, importing
from annotate.web.api import serializers
from annotate.web.api.permissions import IsAdmin, IsReviewer, OwnAnnotationOrReviewer, annotations_visible_to

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser


class IgnoreAcceptHeader(BaseContentNegotiation):
    """A download is JSON Lines whatever the client's Accept header says."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ProjectViewSet(viewsets.ReadOnlyModelViewSet):
    """The projects the user belongs to (a site admin: all), each with its role and URLs. Every
    other route is a project's: under /p/<slug>/ (for example /p/<slug>/api/annotations)."""

    serializer_class = serializers.ProjectSerializer
    permission_classes = [IsAuthenticated]
    lookup_field = "slug"
    pagination_class = None

    def get_queryset(self) -> QuerySet:
        return Project.objects.visible_to(self.request.user).order_by("slug")


class ProjectScoped(GenericAPIView):
    """A viewset over one project's rows: those of the request's project (annotate.web.project_urls)
    and no other, so an object of another project answers 404 as one that does not exist."""

    def get_queryset(self) -> QuerySet:
        if getattr(self, "swagger_fake_view", False):  # the schema's generator asks with no project
            return super().get_queryset().none()
        return super().get_queryset().filter(project=project_of(self.request))


class ProblemViewSet(ProjectScoped, viewsets.ReadOnlyModelViewSet):
    """Problems of the pool (reviewers and admins)."""

    queryset = Problem.objects.order_by("id")
    serializer_class = serializers.ProblemSerializer
    permission_classes = [IsReviewer]
    filterset_fields = ["source", "split"]


class SolutionViewSet(ProjectScoped, viewsets.ReadOnlyModelViewSet):
    """Solutions with their steps and grading (reviewers and admins); scores are under /api/solution-scores."""

    queryset = Solution.objects.select_related("problem").prefetch_related("steps").order_by("id")
    serializer_class = serializers.SolutionSerializer
    permission_classes = [IsReviewer]
    filterset_fields = ["problem", "is_correct", "source", "generator", "is_gold", "is_reference"]

    @extend_schema(responses=serializers.SolutionSourcesSerializer,
                   summary="Every label source's word on each step: people, rollouts (K/N), the judge, the PRM")
    @action(detail=True, methods=["get"])
    def sources(self, request: Request, pk: str | None = None) -> Response:
        solution = self.get_object()
        steps = reviewing.solution_sources(solution.pk)
        return Response(serializers.SolutionSourcesSerializer({"solution": solution.pk, "steps": steps}).data)


class AnnotationViewSet(viewsets.ReadOnlyModelViewSet):
    """Annotations with their step labels. Annotators see only their own."""

    serializer_class = serializers.AnnotationSerializer
    permission_classes = [OwnAnnotationOrReviewer]

    @property
    def filterset_fields(self) -> list[str]:
        """A filter on a field the serializer hides would tell an annotator what it hides."""
        fields = ["solution", "status", "finish_reason", "labeler"]
        request = getattr(self, "request", None)
        project = getattr(request, "project", None)
        if request is not None and project is not None and roles.is_reviewer(request.user, project):
            fields += serializers.REVIEWER_ONLY_ANNOTATION_FIELDS
        return fields

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generator asks with no project
            return Annotation.objects.none()
        return (
            annotations_visible_to(self.request.user, project_of(self.request))
            .select_related("annotator")
            .prefetch_related("step_labels__completions")
            .order_by("id")
        )


class QueueStatsView(APIView):
    permission_classes = [IsReviewer]

    @extend_schema(responses=serializers.QueueStatsSerializer, summary="Queue items by generation and status")
    def get(self, request: Request) -> Response:
        counts = {s: Count("id", filter=Q(status=s)) for s in QueueItem.Status.values}
        project = project_of(request)
        rows = QueueItem.objects.filter(project=project).values("generation").annotate(**counts).order_by("generation")
        data = {
            "current_generation": Generation.objects.filter(project=project).current_number(),
            "submitted_annotations": Annotation.objects.submitted().filter(project=project).count(),
            "generations": list(rows),
        }
        return Response(serializers.QueueStatsSerializer(data).data)


class JobViewSet(ProjectScoped, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Background jobs (admins): POST a request to start one, then poll it by id."""

    permission_classes = [IsAdmin]
    filterset_fields = ["state", "format"]
    request_serializer: type[drf_serializers.Serializer]

    if TYPE_CHECKING:
        # Each kind of job starts one from its validated request body.
        def start(self, data: dict[str, Any], *, user: AbstractBaseUser | AnonymousUser,
                  project: Project) -> ImportJob | ExportJob: ...

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = self.request_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = self.start(body.validated_data, user=request.user, project=project_of(request))
        return Response(self.get_serializer(job).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    create=extend_schema(
        request={"multipart/form-data": serializers.ImportRequestSerializer},
        responses={201: serializers.ImportJobSerializer},
        summary="Upload a JSONL file and import it in the background; poll the job for counts",
    )
)
class ImportJobViewSet(JobViewSet):
    """Import jobs and their counts (admins)."""

    queryset = ImportJob.objects.select_related("created_by").order_by("-id")
    serializer_class = serializers.ImportJobSerializer
    request_serializer = serializers.ImportRequestSerializer
    parser_classes = [MultiPartParser]

    def start(self, data: dict, *, user, project) -> ImportJob:
        upload = data["file"]
        path = importing.save_upload(chunks=upload.chunks(), original_name=upload.name)
        return importing.create_import_job(
            path=path, original_name=upload.name, format=data["format"], split_mode=data["split_mode"],
            source=data["source"], atomic=data["atomic"], user=user, project=project,
        )


@extend_schema_view(
    create=extend_schema(
        request=serializers.ExportRequestSerializer,
        responses={201: serializers.ExportJobSerializer},
        summary="Start an export job; poll it, then download from `download_url`",
    )
)
class ExportJobViewSet(JobViewSet):
    """Export jobs (admins): create one, poll its progress, download its file once succeeded."""

    queryset = ExportJob.objects.select_related("created_by").order_by("-id")
    serializer_class = serializers.ExportJobSerializer
    request_serializer = serializers.ExportRequestSerializer

    def start(self, data: dict, *, user, project) -> ExportJob:
        # from_dict reads the option keys and ignores `format`.
        options = exporting.ExportOptions.from_dict(data)
        return exporting.create_export_job(format=data["format"], options=options, user=user, project=project)

    @extend_schema(
        responses={(200, "application/jsonl"): OpenApiTypes.BINARY, (200, "application/zip"): OpenApiTypes.BINARY,
                   404: OpenApiResponse(description="Not finished")},
        summary="The finished export file",
    )
    @action(detail=True, methods=["get"], content_negotiation_class=IgnoreAcceptHeader)
    def download(self, request: Request, pk: str | None = None) -> FileResponse:
        job = self.get_object()
        path = exporting.finished_file(job)
        if path is None:
            raise Http404("This export has not succeeded (or its file is gone).")
        content_type = "application/zip" if path.suffix == ".zip" else "application/jsonl"
        return FileResponse(path.open("rb"), as_attachment=True, filename=exporting.download_name(job),
                            content_type=content_type)


EXPORT_QUERY = [
    OpenApiParameter("export_format", str, OpenApiParameter.PATH, enum=list(exporting.FORMATS)),
    OpenApiParameter("generation", int, many=True, description="Repeatable; default all generations"),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="Only labels made on or after this instant"),
    OpenApiParameter("include_qc", bool, description="Include quality-control questions (default false)"),
    OpenApiParameter("finish_reason", str, many=True, enum=FinishReason.values, description="Repeatable"),
    OpenApiParameter("neutral_is_good", bool, description="TRL/soft: count a 0 rating as good (default true)"),
]


class StreamExportView(APIView):
    """`GET /api/exports/<format>.jsonl?generation=..`: the export streamed as it is read."""

    permission_classes = [IsAdmin]
    content_negotiation_class = IgnoreAcceptHeader

    @extend_schema(
        parameters=EXPORT_QUERY,
        responses={(200, "application/jsonl"): OpenApiTypes.BINARY},
        summary=f"Stream an export ({', '.join(exporting.FORMATS)}) without a job",
        operation_id="exports_stream",
    )
    def get(self, request: Request, export_format: str) -> StreamingHttpResponse:
        format = export_format
        if format not in exporting.FORMATS:
            raise Http404(f"unknown export format {format!r}; expected one of {', '.join(exporting.FORMATS)}")
        query = request.query_params
        body = serializers.ExportRequestSerializer(data={
            "format": format,
            "generations": query.getlist("generation"),
            "finish_reasons": query.getlist("finish_reason"),
            **{key: query[key] for key in ("since", "include_qc", "neutral_is_good") if key in query},
        })
        if not body.is_valid():
            raise ValidationError(body.errors)
        rows = exporting.iter_jsonl(format=format, options=exporting.ExportOptions.from_dict(body.validated_data),
                                    project=project_of(request))
        response = StreamingHttpResponse(rows, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="stepwise-{format}.jsonl"'
        return response
