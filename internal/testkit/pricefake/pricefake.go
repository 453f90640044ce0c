// Package pricefake is a stand-in for the AWS Price List API (GetProducts, the JSON 1.1 protocol
// the SDK speaks): it serves the Linux on-demand prices it is given, per region and instance
// type, in the Price List's document shape, and counts the requests. Point the SDK at it with
// AWS_ENDPOINT_URL_PRICING.
package pricefake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Server serves prices.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	prices   map[string]float64 // region/type → USD an hour
	requests int
}

// Default are the on-demand prices the test bed's stand-in serves (make testbed-up), keyed
// "region/type": the Linux list prices of us-east-1 for the types the local world launches. A
// type not listed has no price, as a type the Price List lacks would.
var Default = map[string]float64{
	"us-east-1/c7i.large": 0.08925,
	"us-east-1/c6i.large": 0.085,
	"us-east-1/m7i.large": 0.1008,
	"us-east-1/c7g.large": 0.0725,
	"us-east-1/t3.micro":  0.0104,
}

// New starts a stand-in serving prices, keyed "region/type" (us-east-1/c7i.large).
func New(prices map[string]float64) *Server {
	s := &Server{prices: prices}
	s.srv = httptest.NewServer(s)
	return s
}

// Handler returns a stand-in's handler without a server of its own, for a process that serves
// it (the test bed's).
func Handler(prices map[string]float64) http.Handler { return &Server{prices: prices} }

// ServeHTTP answers GetProducts, and GET /healthz (the test bed's probe).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("pricefake\n"))
		return
	}
	s.serve(w, r)
}

// URL is the endpoint to give the SDK.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests counts the GetProducts requests served.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Price is the price served for type in region, and whether there is one.
func (s *Server) Price(region, typ string) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.prices[region+"/"+typ]
	return p, ok
}

type filter struct {
	Field, Type, Value string
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "AWSPriceListService.GetProducts" {
		http.Error(w, `{"__type":"UnknownOperationException","message":"only GetProducts is served"}`, http.StatusBadRequest)
		return
	}
	var in struct {
		ServiceCode string
		Filters     []filter
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, `{"__type":"InvalidParameterException","message":"bad body"}`, http.StatusBadRequest)
		return
	}
	f := map[string]string{}
	for _, x := range in.Filters {
		f[x.Field] = x.Value
	}
	s.mu.Lock()
	s.requests++
	usd, ok := s.prices[f["regionCode"]+"/"+f["instanceType"]]
	s.mu.Unlock()
	var docs []string
	if ok && in.ServiceCode == "AmazonEC2" && f["operatingSystem"] == "Linux" {
		docs = append(docs, document(f["instanceType"], f["regionCode"], usd))
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{"FormatVersion": "aws_v1", "PriceList": docs})
}

// document is one product of the Price List, as GetProducts returns it (a JSON string).
func document(typ, region string, usd float64) string {
	sku := "SKU" + typ
	doc := map[string]any{
		"product": map[string]any{"productFamily": "Compute Instance", "sku": sku,
			"attributes": map[string]string{"instanceType": typ, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared"}},
		"serviceCode": "AmazonEC2",
		"terms": map[string]any{"OnDemand": map[string]any{sku + ".JRTCKXETXF": map[string]any{
			"offerTermCode": "JRTCKXETXF", "sku": sku,
			"priceDimensions": map[string]any{sku + ".JRTCKXETXF.6YS6EN2CT7": map[string]any{
				"unit": "Hrs", "description": fmt.Sprintf("$%.4f per On Demand Linux %s Instance Hour", usd, typ),
				"pricePerUnit": map[string]string{"USD": fmt.Sprintf("%.10f", usd)},
			}},
		}}},
	}
	b, _ := json.Marshal(doc)
	return string(b)
}
