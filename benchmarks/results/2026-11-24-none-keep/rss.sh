# usage: [LARDER=...] [WORK=...] rss.sh durability seconds
D=$1; T=$2
LARDER=${LARDER:-target/release/larder}; WORK=${WORK:-/tmp/larder-rss}; mkdir -p "$WORK"
rm -rf "$WORK"/rdata
"$LARDER" serve -p 22123 --durability $D --data-dir "$WORK"/rdata > "$WORK"/rsrv.log 2>&1 &
SP=$!
sleep 1
"$LARDER" bench -s 127.0.0.1:22123 -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --requests 1000000 --duration 20s >/dev/null 2>&1
echo "$D after preload: rss $(awk '/VmRSS/{print $2}' /proc/$SP/status) kB"
"$LARDER" bench -s 127.0.0.1:22123 -t 2 -c 25 -P 16 --ratio 0:1 -k 1000000 --duration ${T}s 2>&1 | grep throughput &
BP=$!
max=0; for i in $(seq 1 $((T/2))); do sleep 2; r=$(awk '/VmRSS/{print $2}' /proc/$SP/status); [ $r -gt $max ] && max=$r; echo -n "$r "; done; echo
wait $BP
echo "$D max rss $max kB; at end $(awk '/VmRSS/{print $2}' /proc/$SP/status) kB"
kill $SP; wait $SP
