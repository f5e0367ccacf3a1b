fn main() {
    let v = hcp_etcd_admission::crd::hcpetcdbackup_crd();
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
    println!("{}", serde_json::to_string_pretty(&hcp_etcd_admission::crd::hostedcluster_schema()).unwrap());
}
