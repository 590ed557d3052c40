// Test oracle: asks the JDK (and Kafka's own classes, when on the classpath) what aclgate must
// reproduce. Reads one request per line on stdin, fields base64-encoded and tab-separated;
// writes one line per request: "=" + base64(result) or "!" + exception class + ": " + message.
//
//   host  <IP address literal>                   InetAddress.getByName(ip).getHostAddress()
//   dn    <DER certificate>                      X509Certificate.getSubjectX500Principal().getName()
//   map   <rules> <distinguished name>           Kafka's SslPrincipalMapper.fromRules(rules).getName(dn)
//   rules <rules>                                Kafka's SslPrincipalMapper.fromRules(rules).toString()
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
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }
}
