"""A web process of its own, for tests: serves requests through Django's test client, then
reports what it imported. Run as `python -m tests.web_process USER_ID VERSION_ID`.

The pytest process imports torch for its own checks, so whether the web side does must be
asked of a process that only ever served web requests.
"""
import json
import sys

import django


def main(user_id: int, version_id: int) -> dict:
    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(pk=user_id))
    rescore = client.post(f"/models/{version_id}/rescore/")
    score = client.post("/api/score", {"problem": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "# Answer\n\n5"]},
                        content_type="application/json")
    search = client.post("/api/search", {"problem": "What is 2 + 3?", "method": "beam", "budget": {"max_tokens": 12},
                                          "options": {"beam_width": 1, "expansions": 2, "max_step_tokens": 4}},
                         content_type="application/json")
    return {
        "rescore": [rescore.status_code, rescore.get("Location")],
        "score": [score.status_code, score.json()],
        "search": [search.status_code, search.json()],
        "torch_loaded": "torch" in sys.modules,
        "transformers_loaded": "transformers" in sys.modules,
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
