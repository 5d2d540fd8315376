// Command aggregator-shim stands in for kube-apiserver's aggregation layer in front of a sandbox-apiserver
// backend, with kube-aggregator's and kube-openapi's own code (v1.36.3), so the real kubectl can be pointed at it
// before the server exists:
//
//   - /apis: kube-aggregator's discovery manager fetches the backend's /apis (aggregated v2, with the legacy
//     /apis/<group>/<version> fallback when -legacy-discovery is set) and serves the merged document;
//   - /openapi/v2: kube-aggregator's downloader fetches the backend's spec, which is filtered and merged into
//     Kubernetes' own swagger.json as the aggregator does, then served by kube-openapi's handler (JSON and the
//     gnostic protobuf kubectl asks for);
//   - /openapi/v3: kube-aggregator's v3 proxier serves the backend's root and proxies the group-version documents;
//   - anything else under /apis/<group>/<version> is proxied to the backend.
//
// It prints one JSON line on stdout: the address it serves, and what it found while loading (errors included),
// then serves until stdin closes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryendpoint "k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/client-go/discovery"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	v2aggregator "k8s.io/kube-aggregator/pkg/controllers/openapi/aggregator"
	v3aggregator "k8s.io/kube-aggregator/pkg/controllers/openapiv3/aggregator"
	openapiaggregator "k8s.io/kube-openapi/pkg/aggregator"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

type report struct {
	Listen string `json:"listen"`
	// Discovery as the aggregator merged it: freshness and resources of our group-version.
	Freshness string   `json:"freshness"`
	Resources []string `json:"resources"`
	// v2: the download's status, the status of a second download with the first one's ETag, and the definitions
	// of ours the merge renamed because Kubernetes has a different one of the same name.
	V2Status           int      `json:"v2Status"`
	V2RevalidateStatus int      `json:"v2RevalidateStatus"`
	V2Renamed          []string `json:"v2Renamed"`
	V2ProtobufBytes    int      `json:"v2ProtobufBytes"`
	V3Paths            []string `json:"v3Paths"`
	Errors             []string `json:"errors"`
}

func main() {
	backend := flag.String("backend", "", "URL of the sandbox-apiserver stand-in")
	kubeSwagger := flag.String("kube-swagger", "", "Kubernetes' api/openapi-spec/swagger.json")
	group := flag.String("group", "agents.x-k8s.io", "")
	version := flag.String("version", "v1beta1", "")
	legacy := flag.Bool("legacy-discovery", false, "refuse the aggregated Accept on the way to the backend, so the aggregator falls back to legacy discovery")
	flag.Parse()

	rep := report{Resources: []string{}, V2Renamed: []string{}, V3Paths: []string{}, Errors: []string{}}
	fail := func(format string, args ...any) { rep.Errors = append(rep.Errors, fmt.Sprintf(format, args...)) }

	target, err := url.Parse(*backend)
	if err != nil {
		fail("backend: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var toBackend http.Handler = proxy
	if *legacy {
		toBackend = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/apis" {
				r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
			}
			proxy.ServeHTTP(w, r)
		})
	}
	apiServiceName := *version + "." + *group
	port := int32(443)
	apiService := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: apiServiceName},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: *group, Version: *version, GroupPriorityMinimum: 1000, VersionPriority: 100,
			Service: &apiregistrationv1.ServiceReference{Namespace: "sandbox-system", Name: "sandbox-apiserver", Port: &port},
		},
	}
	m := mux.NewPathRecorderMux("aggregator-shim")

	// Discovery.
	apis := discoveryendpoint.NewResourceManager("apis")
	dm := aggregatorapiserver.NewDiscoveryManager(apis)
	dm.AddAPIService(apiService, toBackend)
	stop := make(chan struct{})
	synced := make(chan struct{})
	go dm.Run(stop, synced)
	select {
	case <-synced:
	case <-time.After(20 * time.Second):
		fail("discovery did not sync in 20 s")
	}
	checkDiscovery(apis, *group, *version, &rep, fail)
	m.Handle("/apis", apis)
	m.Handle("/api", discoveryendpoint.NewResourceManager("api"))
	m.Handle("/version", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`)
	}))

	// OpenAPI v2.
	downloader := v2aggregator.NewDownloader()
	ours, etag, status, err := downloader.Download(toBackend, "")
	rep.V2Status = status
	if err != nil || ours == nil {
		fail("v2 download: status %d, %v", status, err)
	} else {
		_, _, rep.V2RevalidateStatus, err = downloader.Download(toBackend, etag)
		if err != nil {
			fail("v2 revalidation: %v", err)
		}
		merged, err := mergeIntoKubernetes(*kubeSwagger, ours, *group, *version, &rep)
		if err != nil {
			fail("v2 merge: %v", err)
		} else {
			if j, err := merged.MarshalJSON(); err != nil {
				fail("v2 marshal: %v", err)
			} else if pb, err := handler.ToProtoBinary(j); err != nil {
				fail("v2 protobuf (gnostic): %v", err)
			} else {
				rep.V2ProtobufBytes = len(pb)
			}
			handler.NewOpenAPIService(merged).RegisterOpenAPIVersionedService("/openapi/v2", m)
		}
	}

	// OpenAPI v3.
	proxier, err := v3aggregator.BuildAndRegisterAggregator(v3aggregator.NewDownloader(), nil, nil, nil, m)
	if err != nil {
		fail("v3 aggregator: %v", err)
	} else {
		proxier.AddUpdateAPIService(toBackend, apiService)
		if err := proxier.UpdateAPIServiceSpec(apiServiceName); err != nil {
			fail("v3 root: %v", err)
		}
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi/v3", nil))
		var root struct {
			Paths map[string]any `json:"paths"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &root); err != nil {
			fail("v3 merged root: %v", err)
		}
		for p := range root.Paths {
			rep.V3Paths = append(rep.V3Paths, p)
		}
	}

	// kubectl create's field-validation check lists CRDs when no PATCH operation of the kind takes fieldValidation
	// (cli-runtime QueryParamVerifier); in a real cluster our group has none, so the list is empty.
	m.Handle("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"CustomResourceDefinitionList","apiVersion":"apiextensions.k8s.io/v1","metadata":{},"items":[]}`)
	}))
	m.HandlePrefix("/apis/", proxy)

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rep.Listen = "http://" + listener.Addr().String()
	line, _ := json.Marshal(rep)
	fmt.Println(string(line))
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
		os.Exit(0)
	}()
	_ = http.Serve(listener, m)
}

func checkDiscovery(apis http.Handler, group, version string, rep *report, fail func(string, ...any)) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/apis", nil)
	req.Header.Set("Accept", discovery.AcceptV2)
	apis.ServeHTTP(rec, req)
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		fail("merged discovery: %d %v", rec.Code, err)
		return
	}
	for _, g := range list.Items {
		if g.Name != group {
			continue
		}
		for _, v := range g.Versions {
			if v.Version != version {
				continue
			}
			rep.Freshness = string(v.Freshness)
			for _, r := range v.Resources {
				rep.Resources = append(rep.Resources, r.Resource)
				for _, s := range r.Subresources {
					rep.Resources = append(rep.Resources, r.Resource+"/"+s.Subresource)
				}
			}
		}
	}
}

// mergeIntoKubernetes does what kube-aggregator's specAggregator does with a downloaded spec: keep the paths under
// the APIService's group-version, then merge into the local spec, renaming conflicting definitions.
func mergeIntoKubernetes(kubeSwagger string, ours *spec.Swagger, group, version string, rep *report) (*spec.Swagger, error) {
	raw, err := os.ReadFile(kubeSwagger)
	if err != nil {
		return nil, err
	}
	merged := &spec.Swagger{}
	if err := merged.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	before := map[string]bool{}
	for k := range merged.Definitions {
		before[k] = true
	}
	filtered := openapiaggregator.FilterSpecByPathsWithoutSideEffects(ours, []string{"/apis/" + group + "/" + version + "/"})
	if err := openapiaggregator.MergeSpecsIgnorePathConflictRenamingDefinitionsAndParameters(merged, filtered); err != nil {
		return nil, err
	}
	for k := range merged.Definitions {
		if !before[k] && strings.Contains(k, "_v") {
			rep.V2Renamed = append(rep.V2Renamed, k)
		}
	}
	return merged, nil
}
