// Command devcluster runs a real Kubernetes control plane for governor's tests and
// local development: an embedded etcd (go.etcd.io/etcd/server/v3/embed) and the
// upstream kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver/app) in ONE process,
// both on 127.0.0.1.
//
// There is no controller-manager, scheduler or kubelet: objects are stored and
// validated, admission and RBAC apply, but nothing reconciles them (a Deployment
// gets no ReplicaSet, a deleted namespace stays Terminating).
//
// Everything lives in -state-dir:
//
//	pki/                 CA, serving cert, front-proxy CA + client cert, SA key pair
//	tokens.csv           static bearer tokens (admin + less-privileged test users)
//	ports.json           ports chosen on first start, reused while they are free
//	etcd/                etcd data
//	admin.kubeconfig     admin (group system:masters)
//	users/<name>.kubeconfig  one per test user (no RBAC grants of their own)
//	api-url              https://127.0.0.1:<port>
//
// SIGTERM/SIGINT stop the API server gracefully, then etcd.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // CronJob time zones, as the upstream kube-apiserver binary does

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

const (
	host             = "127.0.0.1"
	serviceCIDR      = "10.0.0.0/24"
	serviceAccountIs = "https://kubernetes.default.svc.cluster.local"
	frontProxyClient = "front-proxy-client"
)

// testUsers are pre-provisioned, less-privileged identities. They are authenticated
// (group system:authenticated plus governor:testers) but bound to nothing: tests
// grant them what they need with Roles/RoleBindings.
var testUsers = []string{"governor-test-1", "governor-test-2", "governor-test-3"}

func main() {
	stateDir := flag.String("state-dir", "", "directory for etcd data, certificates, tokens and kubeconfigs (required)")
	verbosity := flag.Int("v", 1, "kube-apiserver log verbosity")
	flag.Parse()
	if *stateDir == "" {
		fatalf("-state-dir is required")
	}
	if err := run(*stateDir, *verbosity); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "devcluster: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "devcluster: %s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
}

func run(stateDir string, verbosity int) error {
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	pki := filepath.Join(stateDir, "pki")
	for _, d := range []string{stateDir, pki, filepath.Join(stateDir, "users")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := ensurePKI(pki); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	tokens, err := ensureTokens(filepath.Join(stateDir, "tokens.csv"))
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	ports, err := ensurePorts(filepath.Join(stateDir, "ports.json"))
	if err != nil {
		return fmt.Errorf("ports: %w", err)
	}

	etcd, err := startEtcd(filepath.Join(stateDir, "etcd"), ports)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer func() {
		logf("stopping etcd")
		etcd.Close()
	}()

	apiURL := fmt.Sprintf("https://%s", net.JoinHostPort(host, strconv.Itoa(ports.API)))
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(stateDir, "admin.kubeconfig"), apiURL, caPEM, "admin", tokens["admin"]); err != nil {
		return err
	}
	for _, u := range testUsers {
		if err := writeKubeconfig(filepath.Join(stateDir, "users", u+".kubeconfig"), apiURL, caPEM, u, tokens[u]); err != nil {
			return err
		}
	}
	if err := writeFileAtomic(filepath.Join(stateDir, "api-url"), []byte(apiURL+"\n"), 0o600); err != nil {
		return err
	}

	p := func(name string) string { return filepath.Join(pki, name) }
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://%s", net.JoinHostPort(host, strconv.Itoa(ports.EtcdClient))),
		"--bind-address=" + host,
		"--advertise-address=" + host,
		"--secure-port=" + strconv.Itoa(ports.API),
		"--cert-dir=" + p("generated"),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--token-auth-file=" + filepath.Join(stateDir, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + serviceAccountIs,
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// No controller-manager creates the "default" ServiceAccount, so the
		// ServiceAccount admission plugin would reject every Pod (envtest does the same).
		"--disable-admission-plugins=ServiceAccount",
		// Aggregation layer: lets an APIService (e.g. metrics.k8s.io) be registered.
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p("front-proxy-client.key"),
		// No kube-proxy, so ClusterIPs lead nowhere. The aggregator dials an APIService's
		// Service by ClusterIP, or by name if it is an ExternalName Service: register
		// local backends as `type: ExternalName, externalName: localhost` (README.md).
		// (--enable-aggregator-routing would dial EndpointSlice addresses instead, which
		// may not be loopback addresses, and does not support ExternalName.)
		"--enable-aggregator-routing=false",
		// The "kubernetes" Service's endpoints would be 127.0.0.1, which Endpoints
		// validation rejects (every 10 s, in the log); nothing in-cluster needs them.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=" + strconv.Itoa(verbosity),
	}
	logf("kube-apiserver on %s (etcd on %s:%d)", apiURL, host, ports.EtcdClient)
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	if code := cli.Run(cmd); code != 0 {
		return fmt.Errorf("kube-apiserver exited with code %d", code)
	}
	logf("kube-apiserver stopped")
	return nil
}

// ---- etcd ----------------------------------------------------------------

func startEtcd(dir string, ports *portSet) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "devcluster"
	cfg.Dir = dir
	u := func(port int) url.URL {
		return url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(port))}
	}
	cfg.ListenClientUrls = []url.URL{u(ports.EtcdClient)}
	cfg.AdvertiseClientUrls = []url.URL{u(ports.EtcdClient)}
	cfg.ListenPeerUrls = []url.URL{u(ports.EtcdPeer)}
	cfg.AdvertisePeerUrls = []url.URL{u(ports.EtcdPeer)}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// Disposable test data: skip fsync (much faster on slow disks; a crash may lose the
	// last writes, `devcluster.sh down && rm -rf` the state dir if it ever will not start).
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 2 << 30
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "5m"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		logf("etcd ready")
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd not ready after 60s")
	}
}

// ---- ports ---------------------------------------------------------------

type portSet struct {
	API        int `json:"api"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
}

// ensurePorts reuses the ports of the previous start while they are free (so a
// kubeconfig stays valid across restarts), else picks new free ones.
func ensurePorts(path string) (*portSet, error) {
	var ps portSet
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &ps) == nil &&
		portFree(ps.API) && portFree(ps.EtcdClient) && portFree(ps.EtcdPeer) &&
		ps.API != ps.EtcdClient && ps.API != ps.EtcdPeer && ps.EtcdClient != ps.EtcdPeer {
		return &ps, nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var got []int
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		got = append(got, l.Addr().(*net.TCPAddr).Port)
	}
	ps = portSet{API: got[0], EtcdClient: got[1], EtcdPeer: got[2]}
	b, _ := json.MarshalIndent(ps, "", "  ")
	return &ps, writeFileAtomic(path, b, 0o600)
}

func portFree(port int) bool {
	if port <= 0 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ---- tokens --------------------------------------------------------------

// ensureTokens writes the static token file once: token,user,uid,"groups".
func ensureTokens(path string) (map[string]string, error) {
	if b, err := os.ReadFile(path); err == nil {
		out := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ",", 3)
			if len(f) >= 2 {
				out[f[1]] = f[0]
			}
		}
		if out["admin"] != "" {
			return out, nil
		}
	}
	out := map[string]string{}
	var sb strings.Builder
	add := func(user, groups string) {
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			panic(err)
		}
		tok := hex.EncodeToString(buf)
		out[user] = tok
		fmt.Fprintf(&sb, "%s,%s,%s,\"%s\"\n", tok, user, user, groups)
	}
	add("admin", "system:masters")
	for _, u := range testUsers {
		add(u, "governor:testers")
	}
	return out, writeFileAtomic(path, []byte(sb.String()), 0o600)
}

// ---- kubeconfig ----------------------------------------------------------

func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	// Plain YAML; base64 of the CA inline so the file stands alone.
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: governor-dev
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s@governor-dev
  context:
    cluster: governor-dev
    user: %s
    namespace: default
current-context: %s@governor-dev
`, server, b64(caPEM), user, token, user, user, user)
	return writeFileAtomic(path, []byte(kc), 0o600)
}

// ---- PKI -----------------------------------------------------------------

type keyPair struct {
	cert *x509.Certificate
	key  any
}

func ensurePKI(dir string) error {
	p := func(name string) string { return filepath.Join(dir, name) }
	if allExist(p("ca.crt"), p("apiserver.crt"), p("front-proxy-ca.crt"), p("front-proxy-client.crt"), p("sa.key"), p("sa.pub")) {
		return nil
	}
	logf("generating certificates and keys in %s", dir)
	ca, err := selfSignedCA("governor-devcluster-ca")
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	srv, err := leaf(ca, "kube-apiserver", nil, dns, ips, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	if err := writePair(dir, "apiserver", srv); err != nil {
		return err
	}
	fpca, err := selfSignedCA("governor-devcluster-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := writePair(dir, "front-proxy-ca", fpca); err != nil {
		return err
	}
	fpc, err := leaf(fpca, frontProxyClient, nil, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	if err := writePair(dir, "front-proxy-client", fpc); err != nil {
		return err
	}
	// Admin client certificate (alternative to the admin token, e.g. for curl).
	adm, err := leaf(ca, "admin", []string{"system:masters"}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	if err := writePair(dir, "admin", adm); err != nil {
		return err
	}
	// ServiceAccount token signing key (RSA: accepted by every client library).
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	skey, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		return err
	}
	spub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(p("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: skey}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(p("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spub}), 0o600)
}

func selfSignedCA(cn string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &keyPair{cert: cert, key: key}, err
}

func leaf(ca *keyPair, cn string, orgs, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &keyPair{cert: cert, key: key}, err
}

func writePair(dir, name string, kp *keyPair) error {
	kder, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw}), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}

// ---- files ---------------------------------------------------------------

func allExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
