# The image contract (docs/configuration.md, "The image"): what the agent and the runner need,
# installed from the distribution's repositories when a stock image lacks it (Amazon Linux 2023's
# come through the S3 gateway endpoint; Ubuntu's need the internet). An image that has it all (a
# baked one) installs nothing. The agent checks the contract again when it starts.
hangar_libdirs="${HANGAR_IMAGE_LIBDIRS:-/usr/lib64 /lib64 /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu}"
hangar_has_lib() {
  local d
  for d in $hangar_libdirs; do
    compgen -G "$d/$1*" >/dev/null && return 0
  done
  return 1
}
hangar_need=()
command -v git >/dev/null || hangar_need+=(git)
command -v iptables >/dev/null || hangar_need+=(iptables)
hangar_has_lib libicuuc.so || hangar_need+=(icu)
command -v aws >/dev/null || hangar_need+=(aws)
if [ "${#hangar_need[@]}" -gt 0 ]; then
  echo "hangar: the image lacks ${hangar_need[*]}: installing"
  if command -v dnf >/dev/null; then
    hangar_pkgs=()
    for n in "${hangar_need[@]}"; do
      case "$n" in
        icu) hangar_pkgs+=(libicu) ;;
        iptables) hangar_pkgs+=(iptables-nft) ;;
        aws) hangar_pkgs+=(awscli-2) ;;
        *) hangar_pkgs+=("$n") ;;
      esac
    done
    dnf install -y -q "${hangar_pkgs[@]}"
  elif command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    hangar_pkgs=()
    for n in "${hangar_need[@]}"; do
      case "$n" in
        icu) hangar_pkgs+=("$(apt-cache pkgnames libicu | grep -E '^libicu[0-9]+$' | sort -V | tail -n 1)") ;;
        aws) ;; # Ubuntu ships the AWS CLI as a snap
        *) hangar_pkgs+=("$n") ;;
      esac
    done
    [ "${#hangar_pkgs[@]}" -eq 0 ] || apt-get install -y -qq "${hangar_pkgs[@]}"
    if [[ " ${hangar_need[*]} " == *" aws "* ]]; then snap install aws-cli --classic; fi
  else
    echo "hangar: no dnf or apt-get to install ${hangar_need[*]} with: bake them into the image" >&2
    exit 1
  fi
fi
