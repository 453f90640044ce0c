// Package quotafake stands in for the account's quotas, which the emulators do not answer:
// Service Quotas' GetServiceQuota (EC2's vCPU quotas) and Lambda's GetAccountSettings (the
// account's concurrency). Point the SDK at it with AWS_ENDPOINT_URL_SERVICE_QUOTAS and
// AWS_ENDPOINT_URL_LAMBDA; the values are set by the test, as an account's are by AWS.
package quotafake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Server is the stand-in. It is safe for concurrent use.
type Server struct {
	mu       sync.Mutex
	srv      *httptest.Server
	quotas   map[string]float64 // service/code → value
	lambda   int                // the account's concurrent executions
	reserved int                // what its functions reserve
}

// DefaultLambdaConcurrency is an established account's Lambda concurrency.
const DefaultLambdaConcurrency = 1000

// New starts a stand-in on a loopback port with an established account's Lambda concurrency
// and no EC2 quota set (GetServiceQuota answers NoSuchResourceException until SetQuota).
func New() *Server {
	s := &Server{quotas: map[string]float64{}, lambda: DefaultLambdaConcurrency}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the endpoint for both services.
func (s *Server) URL() string { return s.srv.URL }

// Close stops it.
func (s *Server) Close() { s.srv.Close() }

// Env is the environment that points the SDK's two clients at the stand-in.
func (s *Server) Env() []string {
	return []string{"AWS_ENDPOINT_URL_SERVICE_QUOTAS=" + s.srv.URL, "AWS_ENDPOINT_URL_LAMBDA=" + s.srv.URL}
}

// SetQuota sets a quota's applied value (service "ec2", code "L-1216C47A", …).
func (s *Server) SetQuota(service, code string, value float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quotas[service+"/"+code] = value
}

// SetLambda sets the account's Lambda concurrency and what its functions reserve of it.
func (s *Server) SetLambda(concurrency, reserved int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lambda, s.reserved = concurrency, reserved
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/2016-08-19/account-settings"):
		writeJSON(w, http.StatusOK, map[string]any{
			"AccountLimit": map[string]any{"ConcurrentExecutions": s.lambda, "UnreservedConcurrentExecutions": s.lambda - s.reserved,
				"CodeSizeUnzipped": 262144000, "CodeSizeZipped": 52428800, "TotalCodeSize": 80530636800},
			"AccountUsage": map[string]any{"FunctionCount": 0, "TotalCodeSize": 0},
		})
	case r.Method == http.MethodPost && r.Header.Get("X-Amz-Target") == "ServiceQuotasV20190624.GetServiceQuota":
		var in struct{ ServiceCode, QuotaCode string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			awsError(w, "IllegalArgumentException", err.Error())
			return
		}
		v, ok := s.quotas[in.ServiceCode+"/"+in.QuotaCode]
		if !ok {
			awsError(w, "NoSuchResourceException", fmt.Sprintf("quota %s of %s is not set in the stand-in", in.QuotaCode, in.ServiceCode))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"Quota": map[string]any{"ServiceCode": in.ServiceCode, "QuotaCode": in.QuotaCode,
			"QuotaName": in.QuotaCode, "Value": v, "Unit": "None", "Adjustable": true, "GlobalQuota": false}})
	default:
		awsError(w, "UnknownOperationException", r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Amz-Target"))
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func awsError(w http.ResponseWriter, kind, msg string) {
	w.Header().Set("X-Amzn-Errortype", kind)
	writeJSON(w, http.StatusBadRequest, map[string]string{"__type": kind, "message": msg})
}
