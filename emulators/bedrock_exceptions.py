"""Bedrock's error responses: exception names, HTTP statuses and wording.

An HTTP error is ``x-amzn-ErrorType: <Name>:http://internal.amazon.com/coral/com.amazon.bedrock/``
plus ``x-amzn-RequestId`` and a ``{"message": ...}`` JSON body. In a stream the same exceptions
are frames whose ``:exception-type`` is the camelCase member name (``throttlingException``).

``error:<status>`` scenarios (see :mod:`.scenarios`) become the Bedrock exception for that status:

======  ==========================================================================
status  exception (HTTP status sent)
======  ==========================================================================
400     ValidationException (400)
401     ExpiredTokenException (403): Bedrock has no 401; an expired credential
402     ServiceQuotaExceededException (400)
403     AccessDeniedException (403), with an account id and ARNs in the message
404     ResourceNotFoundException (404)
408     ModelTimeoutException (408); 504 too
413     ValidationException (400) ``Input is too long.``
424     ModelErrorException (424)
429     ThrottlingException (429)
500     InternalServerException (500); 502 and other 5xx too
503     ServiceUnavailableException (503); 529 too
======  ==========================================================================

Other 4xx statuses are a ValidationException. Throttling carries ``retry-after`` (and every
retryable error ``retry-after-ms`` when configured), as the first-party emulator does, so relaying
can be tested; real Bedrock sends neither.
"""

from __future__ import annotations

from typing import Any, Final

from .errors import ApiError

ERROR_TYPE_SUFFIX: Final = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
INPUT_TOO_LONG: Final = "Input is too long."
ACCOUNT_ID: Final = "123456789012"

MESSAGES: Final[dict[str, tuple[int, str]]] = {
    "ValidationException": (400, "Malformed input request, please reformat your input and try again."),
    "ServiceQuotaExceededException": (
        400,
        "Your request exceeds the service quota for your account. You can view your quotas at "
        "Viewing service quotas. You can resubmit your request later.",
    ),
    "AccessDeniedException": (
        403,
        f"User: arn:aws:sts::{ACCOUNT_ID}:assumed-role/switchyard-emulator/session is not authorized "
        "to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1::foundation-model/"
        "anthropic.claude-sonnet-4-5-20250929-v1:0 because no identity-based policy allows the "
        "bedrock:InvokeModel action",
    ),
    "ResourceNotFoundException": (404, "Model not found."),
    "ModelTimeoutException": (
        408,
        "Model has timed out in processing the request. Try your request again.",
    ),
    "ModelErrorException": (424, "The model returned an error. Try your request again."),
    "ModelStreamErrorException": (424, "The model stream encountered an error. Try your request again."),
    "ThrottlingException": (429, "Too many requests, please wait before trying again."),
    "ModelNotReadyException": (429, "The model is not ready to serve inference requests."),
    "InternalServerException": (
        500,
        "The system encountered an unexpected error during processing. Try your request again.",
    ),
    "ServiceUnavailableException": (503, "Bedrock is unable to process your request."),
    "UnrecognizedClientException": (403, "The security token included in the request is invalid."),
    "ExpiredTokenException": (403, "The security token included in the request is expired"),
    "InvalidSignatureException": (
        403,
        "The request signature we calculated does not match the signature you provided. Check your "
        "AWS Secret Access Key and signing method. Consult the service documentation for details.",
    ),
    "MissingAuthenticationTokenException": (403, "Missing Authentication Token"),
    "UnknownOperationException": (404, "Unknown operation"),
}

_BY_STATUS: Final[dict[int, str]] = {
    400: "ValidationException",
    401: "ExpiredTokenException",
    402: "ServiceQuotaExceededException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    413: "ValidationException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
    504: "ModelTimeoutException",
    529: "ServiceUnavailableException",
}


class BedrockError(Exception):
    """A Bedrock error response, raised anywhere in request handling."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        members: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        status, default = MESSAGES.get(code, (400, ""))
        self.code = code
        self.status = status
        self.text = message if message is not None else default
        self.members = dict(members or {})
        self.headers = dict(headers or {})
        super().__init__(f"{status} {code}: {self.text}")

    def body(self) -> dict[str, Any]:
        return {"message": self.text, **self.members}

    @property
    def error_type_header(self) -> str:
        return self.code + ERROR_TYPE_SUFFIX


def exception_for_status(status: int) -> str:
    """The Bedrock exception an ``error:<status>`` scenario produces."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return "InternalServerException" if status >= 500 else "ValidationException"


def from_api_error(error: ApiError) -> BedrockError:
    """A scripted first-party error (scenario ``error:<status>``, ``stream_error``) as Bedrock's."""
    code = exception_for_status(error.status)
    message = INPUT_TOO_LONG if error.status == 413 else error.message if error.status == 400 else None
    members: dict[str, Any] = {}
    if code == "ModelErrorException":
        members = {"originalStatusCode": 500, "resourceName": "anthropic.claude"}
    return BedrockError(code, message, members, dict(error.headers))


def stream_member(code: str) -> str:
    """The camelCase ``ResponseStream`` member name of an exception (``throttlingException``)."""
    return code[:1].lower() + code[1:]


def stream_code(member: str) -> str:
    """The exception name of a ``ResponseStream`` member (``ThrottlingException``)."""
    return member[:1].upper() + member[1:]


def validation(message: str) -> BedrockError:
    return BedrockError("ValidationException", message)


def malformed(detail: str) -> BedrockError:
    """Bedrock's JSON-schema validation wording."""
    return validation(f"Malformed input request: {detail}, please reformat your input and try again.")
