FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.txt requirements-nodeps.txt ./
# The CPU wheel index keeps the image small; swap in a CUDA index for GPU workers.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt \
 && pip install --no-cache-dir --no-deps -r requirements-nodeps.txt
COPY . .
RUN useradd --create-home stepwise && mkdir -p /data && chown stepwise /data
USER stepwise
EXPOSE 8000
