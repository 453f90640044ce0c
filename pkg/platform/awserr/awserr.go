// Package awserr classifies AWS errors in one place, so that every caller decides the same way
// whether to fall back (capacity), wait (throttled), treat a resource as gone (not found), treat a
// write as a lost race (condition failed) or stop and tell the operator what to fix (permanent).
//
// Transient failures (throttling, 5xx, connection resets) are retried by the SDK's retryer before
// an error ever reaches this package; what arrives here has already been retried.
package awserr

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/smithy-go"
)

// Kind is the class of an AWS error.
type Kind int

// The classes, from most to least specific. Unknown means the code is not one Hangar knows; callers
// treat it like Permanent unless they have a reason not to.
const (
	Unknown Kind = iota
	// Capacity: AWS has no capacity for this request right now (type, AZ or spot market); another
	// type or AZ, or the same later, may work.
	Capacity
	// Throttled: request rate or throughput exceeded, even after the SDK's retries.
	Throttled
	// NotFound: the resource (instance, queue, item's table, parameter) does not exist.
	NotFound
	// ConditionFailed: a conditional write lost (DynamoDB ConditionalCheckFailed).
	ConditionFailed
	// Permanent: the request can never succeed as made (bad AMI, missing role, access denied,
	// invalid parameter). Retrying is pointless; the message must say what to fix.
	Permanent
	// Canceled: the caller's context ended.
	Canceled
	// WrongState: the resource is in a state the request cannot act on yet, such as starting an
	// instance that is still stopping; the same request may work once the state settles.
	WrongState
)

func (k Kind) String() string {
	switch k {
	case Capacity:
		return "capacity"
	case Throttled:
		return "throttled"
	case NotFound:
		return "not found"
	case ConditionFailed:
		return "condition failed"
	case Permanent:
		return "permanent"
	case Canceled:
		return "canceled"
	case WrongState:
		return "wrong state"
	default:
		return "unknown"
	}
}

// Classify returns the class of err. A nil error is Unknown.
func Classify(err error) Kind {
	if err == nil {
		return Unknown
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Canceled
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return ClassifyCode(api.ErrorCode())
	}
	return Unknown
}

// Code returns the AWS error code of err, or "" when err carries none.
func Code(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// Is reports whether err is of class k.
func Is(err error, k Kind) bool { return Classify(err) == k }

// capacityCodes are EC2 codes (including those CreateFleet reports per override in its response
// rather than as an API error) that mean "not now, not here".
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity":         true,
	"InsufficientHostCapacity":             true,
	"InsufficientReservedInstanceCapacity": true,
	"InsufficientCapacity":                 true,
	"InsufficientFreeAddressesInSubnet":    true,
	"SpotMaxPriceTooLow":                   true,
	"MaxSpotInstanceCountExceeded":         true,
	"MaxSpotFleetRequestCountExceeded":     true,
	"UnfulfillableCapacity":                true,
	"Unsupported":                          true, // the type is not offered in this AZ
	"InstanceLimitExceeded":                true,
	"VcpuLimitExceeded":                    true,
}

var throttleCodes = map[string]bool{
	"Throttling":                             true,
	"ThrottlingException":                    true,
	"ThrottledException":                     true,
	"RequestThrottled":                       true,
	"RequestThrottledException":              true,
	"RequestLimitExceeded":                   true,
	"TooManyRequestsException":               true,
	"ProvisionedThroughputExceededException": true,
	"RequestLimitExceededException":          true,
	"LimitExceededException":                 true,
	"SlowDown":                               true,
}

var notFoundCodes = map[string]bool{
	"ResourceNotFoundException":               true,
	"InvalidInstanceID.NotFound":              true,
	"AWS.SimpleQueueService.NonExistentQueue": true,
	"QueueDoesNotExist":                       true,
	"ParameterNotFound":                       true,
	"NoSuchKey":                               true,
}

var conditionCodes = map[string]bool{
	"ConditionalCheckFailedException": true,
	"TransactionConflictException":    true,
}

// ClassifyCode classifies a bare AWS error code, as found in API errors and in the per-override
// errors of a CreateFleet response.
func ClassifyCode(code string) Kind {
	switch {
	case code == "":
		return Unknown
	case capacityCodes[code]:
		return Capacity
	case throttleCodes[code]:
		return Throttled
	case notFoundCodes[code]:
		return NotFound
	case conditionCodes[code]:
		return ConditionFailed
	case code == "IncorrectInstanceState", code == "IncorrectState":
		return WrongState
	case strings.HasPrefix(code, "InvalidAMIID"), strings.HasPrefix(code, "InvalidParameter"),
		strings.HasPrefix(code, "InvalidSubnet"), strings.HasPrefix(code, "InvalidLaunchTemplate"),
		strings.HasPrefix(code, "InvalidGroup"), strings.HasPrefix(code, "InvalidKeyPair"),
		strings.HasPrefix(code, "UnauthorizedOperation"), strings.HasPrefix(code, "AccessDenied"),
		strings.HasPrefix(code, "InvalidIamInstanceProfile"), code == "ValidationException",
		code == "InvalidClientTokenId", code == "AuthFailure", code == "OptInRequired",
		code == "MissingParameter", code == "InvalidInput", code == "InvalidUserID.Malformed",
		code == "InvalidInstanceID.Malformed", code == "UnrecognizedClientException":
		// A missing AMI, subnet, template or security group is the operator's to fix.
		return Permanent
	case strings.HasSuffix(code, ".NotFound"), strings.HasSuffix(code, "NotFoundException"):
		return NotFound
	}
	return Unknown
}

// IsNotFound reports whether err says the resource does not exist.
func IsNotFound(err error) bool { return Classify(err) == NotFound }

// IgnoreNotFound returns nil when err says the resource does not exist, and err otherwise: for
// callers to whom a resource already gone is the outcome they wanted (a terminated instance, a
// deleted message).
func IgnoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}

// IsWrongState reports whether err says the resource is not in a state the request can act on yet.
func IsWrongState(err error) bool { return Classify(err) == WrongState }

// IsConditionFailed reports whether err is a conditional write that lost.
func IsConditionFailed(err error) bool { return Classify(err) == ConditionFailed }
