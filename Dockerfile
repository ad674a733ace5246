FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Production packages only: what the tests add (requirements-dev.txt) stays out of the image.
COPY requirements.txt requirements-nodeps.txt ./
# torch from PyPI is the CUDA build on Linux: the ml worker uses the GPU it reserves.
RUN pip install --no-cache-dir -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt
# .dockerignore keeps tests, the git history, virtualenvs and local data out of this copy.
COPY . .
RUN useradd --create-home stepwise && mkdir -p /data && chown stepwise /data
USER stepwise
EXPOSE 8000
