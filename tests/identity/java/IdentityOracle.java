// Test oracle: asks the JDK (and Kafka's own classes, when on the classpath) what aclgate must
// reproduce. Reads one request per line on stdin, fields base64-encoded and tab-separated;
// writes one line per request: "=" + base64(result) or "!" + exception class + ": " + message.
//
//   host  <IP address literal>                   InetAddress.getByName(ip).getHostAddress()
//   dn    <DER certificate>                      X509Certificate.getSubjectX500Principal().getName()
//   map   <rules> <distinguished name>           Kafka's SslPrincipalMapper.fromRules(rules).getName(dn)
//   rules <rules>                                Kafka's SslPrincipalMapper.fromRules(rules).toString()
//   jwt   <jwks file> <audience> <issuer> <skew s> <sub claim> <token>
//                                                Kafka's broker-side OAuthBearerValidatorCallbackHandler:
//                                                principal + "," + lifetime ms, or the error status
//   ssrv  <mechanism> <user> <password>         start Kafka's ScramSaslServer for one user (4096 iterations)
//   sstep <client token>                         its evaluateResponse(); "|complete|authzid" appended when done
//   scram <mechanism> <password> <salt> <iter>   Kafka's ScramFormatter: storedKey + "," + serverKey (base64)

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Base64;

public class IdentityOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Base64.Decoder dec = Base64.getDecoder();
        Base64.Encoder enc = Base64.getEncoder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            byte[][] b = new byte[f.length][];
            for (int i = 1; i < f.length; i++) b[i] = dec.decode(f[i]);
            String out;
            try {
                out = "=" + enc.encodeToString(run(f[0], b).getBytes(StandardCharsets.UTF_8));
            } catch (Throwable e) {
                out = "!" + e.getClass().getName() + ": " + String.valueOf(e.getMessage()).replace("\n", " ");
            }
            System.out.println(out);
            System.out.flush();
        }
    }

    static String s(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    static String run(String op, byte[][] b) throws Exception {
        switch (op) {
            case "host":
                return java.net.InetAddress.getByName(s(b[1])).getHostAddress();
            case "dn": {
                CertificateFactory cf = CertificateFactory.getInstance("X.509");
                X509Certificate c = (X509Certificate) cf.generateCertificate(new ByteArrayInputStream(b[1]));
                return c.getSubjectX500Principal().getName();
            }
            case "map":
                return org.apache.kafka.common.security.ssl.SslPrincipalMapper.fromRules(s(b[1])).getName(s(b[2]));
            case "rules":
                return org.apache.kafka.common.security.ssl.SslPrincipalMapper.fromRules(s(b[1])).toString();
            case "scram": {
                org.apache.kafka.common.security.scram.internals.ScramFormatter f =
                    new org.apache.kafka.common.security.scram.internals.ScramFormatter(
                        org.apache.kafka.common.security.scram.internals.ScramMechanism.forMechanismName(s(b[1])));
                org.apache.kafka.common.security.scram.ScramCredential c =
                    f.generateCredential(b[3], f.saltedPassword(s(b[2]), b[3], Integer.parseInt(s(b[4]))), Integer.parseInt(s(b[4])));
                Base64.Encoder e = Base64.getEncoder();
                return e.encodeToString(c.storedKey()) + "," + e.encodeToString(c.serverKey());
            }
            case "ssrv":
                scramServer = scramServer(s(b[1]), s(b[2]), s(b[3]));
                return "";
            case "sstep": {
                byte[] reply = scramServer.evaluateResponse(b[1]);
                String out = new String(reply, StandardCharsets.UTF_8);
                return scramServer.isComplete() ? out + "|complete|" + scramServer.getAuthorizationID() : out;
            }
            case "jwt":
                return jwt(s(b[1]), s(b[2]), s(b[3]), Integer.parseInt(s(b[4])), s(b[5]), s(b[6]));
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    static javax.security.sasl.SaslServer scramServer;

    static javax.security.sasl.SaslServer scramServer(String mechanism, String user, String password) throws Exception {
        org.apache.kafka.common.security.scram.internals.ScramMechanism mech =
            org.apache.kafka.common.security.scram.internals.ScramMechanism.forMechanismName(mechanism);
        org.apache.kafka.common.security.scram.ScramCredential cred =
            new org.apache.kafka.common.security.scram.internals.ScramFormatter(mech).generateCredential(password, 4096);
        javax.security.auth.callback.CallbackHandler handler = callbacks -> {
            String name = null;
            for (javax.security.auth.callback.Callback cb : callbacks) {
                if (cb instanceof javax.security.auth.callback.NameCallback)
                    name = ((javax.security.auth.callback.NameCallback) cb).getDefaultName();
                else if (cb instanceof org.apache.kafka.common.security.scram.ScramCredentialCallback)
                    ((org.apache.kafka.common.security.scram.ScramCredentialCallback) cb).scramCredential(user.equals(name) ? cred : null);
            }
        };
        return new org.apache.kafka.common.security.scram.internals.ScramSaslServer(mech, java.util.Map.of(), handler);
    }

    static String jwt(String jwks, String audience, String issuer, int skew, String sub, String token) throws Exception {
        String url = new java.io.File(jwks).toURI().toString();
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", url);
        java.util.Map<String, Object> configs = new java.util.HashMap<>();
        configs.put("sasl.oauthbearer.jwks.endpoint.url", url);
        configs.put("sasl.oauthbearer.expected.audience", audience.isEmpty() ? java.util.List.of() : java.util.List.of(audience));
        configs.put("sasl.oauthbearer.expected.issuer", issuer.isEmpty() ? null : issuer);
        configs.put("sasl.oauthbearer.clock.skew.seconds", skew);
        configs.put("sasl.oauthbearer.sub.claim.name", sub);
        configs.put("sasl.oauthbearer.scope.claim.name", "scope");
        configs.put("sasl.oauthbearer.jwt.validator.class", Class.forName("org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator"));
        configs.put("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3600000L);
        configs.put("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 100L);
        configs.put("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", 10000L);
        javax.security.auth.login.AppConfigurationEntry entry = new javax.security.auth.login.AppConfigurationEntry(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            javax.security.auth.login.AppConfigurationEntry.LoginModuleControlFlag.REQUIRED, java.util.Map.of());
        org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler h =
            new org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler();
        h.configure(configs, "OAUTHBEARER", java.util.List.of(entry));
        try {
            org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback cb =
                new org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback(token);
            h.handle(new javax.security.auth.callback.Callback[] {cb});
            if (cb.token() == null) return "error:" + cb.errorStatus();
            return cb.token().principalName() + "," + cb.token().lifetimeMs();
        } finally {
            h.close();
        }
    }
}
