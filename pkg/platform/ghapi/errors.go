package ghapi

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/google/go-github/v66/github"
)

// The GitHub answers callers tell apart; every other error is as go-github returned it.

// status returns the HTTP status of a GitHub API error, or 0.
func status(err error) int {
	var e *github.ErrorResponse
	if errors.As(err, &e) && e.Response != nil {
		return e.Response.StatusCode
	}
	var r *github.RateLimitError
	if errors.As(err, &r) {
		return http.StatusForbidden
	}
	var a *github.AbuseRateLimitError
	if errors.As(err, &a) {
		return http.StatusForbidden
	}
	return 0
}

// IsNotFound reports a 404: the runner (or repository, or organisation) is not there.
func IsNotFound(err error) bool { return status(err) == http.StatusNotFound }

// IgnoreNotFound returns nil for a 404 and err otherwise: deleting what is gone is done.
func IgnoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}

// IsBusy reports GitHub's refusal to delete a runner that is running a job (422).
func IsBusy(err error) bool { return status(err) == http.StatusUnprocessableEntity }

// IsConflict reports a 409: a runner of that name exists already.
func IsConflict(err error) bool { return status(err) == http.StatusConflict }

// IsUnauthorized reports a 401: the credential is expired, revoked or wrong.
func IsUnauthorized(err error) bool { return status(err) == http.StatusUnauthorized }

// IsRetryable reports an answer worth asking again later: a rate limit or a server error, or no
// answer at all (a network error).
func IsRetryable(err error) bool {
	var r *github.RateLimitError
	var a *github.AbuseRateLimitError
	if errors.As(err, &r) || errors.As(err, &a) {
		return true
	}
	code := status(err)
	return code == 0 && err != nil || code == http.StatusTooManyRequests || code >= 500
}

// notFound is the response a lookup that found nothing reports, so that IsNotFound holds.
var notFound = &http.Response{StatusCode: http.StatusNotFound, Request: &http.Request{Method: http.MethodGet, URL: &url.URL{}}}
