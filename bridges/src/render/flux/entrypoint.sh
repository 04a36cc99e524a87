#!/bin/bash
# The node container's command in every node pod of TrainJob @JOB@: starts this pod's Flux broker.
# The lead broker (@LEAD@) runs the trainer's command, given as the arguments, over the whole gang;
# the others join it and wait, retrying until the lead is up.
set -euo pipefail
command="$*"
root=/mnt/flux
config="$root/config"
view="$root/view"
export PATH="$view/bin:$PATH"
if [ -d "$root/software" ]; then mkdir -p /opt/software && cp -a "$root/software/." /opt/software/; fi
python=$(find "$view/lib" -maxdepth 1 -type d -name 'python3.*' | sort | head -n 1)
export PYTHONPATH="${python:+$python/site-packages}${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$view/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FLUX_RC_EXTRA="$view/etc/flux/rc1.d"
# For a shell exec'd into the pod later: `. /mnt/flux/flux-view.sh` finds flux and its socket.
cat > "$root/flux-view.sh" <<VIEW
export PATH="$PATH"
export PYTHONPATH="$PYTHONPATH"
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH"
export fluxsocket=local://$config/run/flux/local
VIEW
# ZeroMQ refuses a certificate others can read.
cp /curve/curve.cert "$config/etc/curve/curve.cert"
chmod go-r "$config/etc/curve/curve.cert"
chown "$(id -u)" "$config/etc/curve/curve.cert"
flux R encode --hosts='@HOSTS@' @RSPEC@ > "$config/etc/flux/system/R"
state="$config/var/lib/flux"
mkdir -p "$state" /tmp/fluxout
options=(
  "-Scron.directory=$config/etc/flux/system/cron.d" -Stbon.fanout=256 "-Srundir=$config/run/flux"
  "-Sstatedir=$state" "-Slocal-uri=local://$config/run/flux/local" -Slog-stderr-level=0
  -Slog-stderr-mode=local
)
if [ "$(hostname)" = '@LEAD@' ]; then
  if [ -z "$command" ]; then
    exec flux broker --config-path "$config/etc/flux/config" "${options[@]}"
  fi
  flux start -o --config "$config/etc/flux/config" "${options[@]}" flux run @RUN_FLAGS@ /bin/bash -c "$command"
else
  until flux start -o --config "$config/etc/flux/config" "${options[@]}"; do
    sleep 15
  done
fi
touch "$root/flux-operator-complete.txt"
