#!/usr/bin/env bash
# Draws one of Varg's benchmark sessions (issue 28) on $DISPLAY, normally an Xvnc,
# for about $SECONDS seconds (default 20), then ends what it started and exits 0.
#
#   DISPLAY=:41 SECONDS=10 bench/vnc/session.sh scrolling-text
#
# With HOLD=1 it then stops drawing but keeps its windows, prints "holding" and waits
# for SIGTERM, so that a test can compare still pictures of a busy screen.
#
# Sessions: scrolling-text, panning-image, redrawn-plot, idle, revisited-slides (a
# presenter flipping back and forth through three slides). No window manager is
# assumed: windows are placed at 0,0 with -geometry and sized from the screen. What is
# drawn is fixed (generated text and pictures, fixed rates), so two recordings of one
# session look alike: each draws a fixed number of steps (SECONDS times its rate), so
# it ends on the same picture every time, a little after SECONDS when the machine is
# slow; only timing and xclock's hands vary. Exits non-zero if a
# program it started died early, so a session that silently drew nothing fails.
set -euo pipefail

# Read first: bash counts SECONDS up from the value it inherits (0 when unset).
duration=$SECONDS
((duration > 0)) || duration=20

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script="$here/$(basename "${BASH_SOURCE[0]}")"

usage() {
  echo "usage: DISPLAY=:N [SECONDS=20] $0 scrolling-text|panning-image|redrawn-plot|idle|revisited-slides" >&2
  exit 2
}

# A linear congruential generator, so the "random" choices repeat run after run; r
# takes its high bits, as the low ones cycle quickly.
rng=28
r=0
next_rand() {
  rng=$(((rng * 1103515245 + 12345) % 2147483648))
  r=$((rng >> 16))
}

# The log that scrolling-text shows: realistic lines, some repeating; the first $1
# at once, so the terminal is full and scrolls from the start, then $2 more, four a
# second. Then it creates the file $3 and waits to be killed.
log_lines() {
  local burst=$1 count=$2 done_file=$3
  local -a levels=(INFO INFO INFO INFO DEBUG WARN INFO ERROR)
  local -a parts=(scheduler http.server cache store.compactor auth rpc.pool metrics ingest)
  local -a msgs=(
    "request GET /api/v2/jobs/%d completed in %d ms"
    "compaction of segment %d finished, %d keys kept"
    "cache miss for key tile:%d, fetched in %d ms"
    "worker %d heartbeat ok, %d tasks running"
    "retrying connection to db-%d:5432 after %d ms"
    "session %d authenticated with token ending in %04d"
    "flushed %d samples to tsdb, lag %d ms"
    "queue depth %d exceeds soft limit %d"
  )
  local i=0 ms level part fmt a b
  while ((i < burst + count)); do
    # A health check every 12 lines, identical each time, as real logs repeat.
    ms=$((i * 250))
    printf -v stamp '2026-11-27 09:%02d:%02d.%03d' $((ms / 60000 % 60)) $((ms / 1000 % 60)) $((ms % 1000))
    if ((i % 12 == 11)); then
      echo "$stamp INFO  http.server      GET /healthz 200 0.4 ms"
    else
      next_rand; level=${levels[r % 8]}
      next_rand; part=${parts[r % 8]}
      next_rand; fmt=${msgs[r % 8]}
      next_rand; a=$((r % 9000 + 100))
      next_rand; b=$((r % 900 + 1))
      # shellcheck disable=SC2059 # the formats are the fixed table above
      printf "%s %-5s %-16s $fmt\n" "$stamp" "$level" "$part" "$a" "$b"
    fi
    i=$((i + 1))
    ((i <= burst)) || sleep 0.25
  done
  touch "$done_file"
  while :; do sleep 3600; done
}

# Fixed text for the idle session's xterm, which then waits to be killed.
static_text() {
  printf '%s\n' "vargr idle desktop" "" "$ uptime" " 09:00:00 up 12 days,  3:04,  1 user,  load average: 0.00, 0.01, 0.05" \
    "$ ls ~/results" "boston.json  san-diego.json  tromso.json  README" "$ "
  while :; do sleep 3600; done
}

case ${1:-} in
  --log-lines) log_lines "$2" "$3" "$4" ;;
  --static-text) static_text ;;
  scrolling-text | panning-image | redrawn-plot | idle | revisited-slides) ;;
  *) usage ;;
esac

: "${DISPLAY:?set DISPLAY to the X display to draw on}"
read -r sw sh < <(xdotool getdisplaygeometry)

pids=()
names=()
work=$(mktemp -d)
cleanup() {
  local status=$?
  trap - EXIT TERM INT
  # gnuplot quits on end of input and reaps its gnuplot_x11; a kill would orphan it.
  exec 3>&-
  [[ ${names[*]} != *gnuplot* ]] || sleep 0.3
  if ((${#pids[@]})); then
    kill -CONT "${pids[@]}" 2>/dev/null || true
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Xvnc paints the cursor into what it sends a viewer that has not moved the pointer
# itself, and X captures (xwd) never show it: a blank root cursor and the pointer
# parked in the bottom-right corner, over the root window that every session leaves
# visible there, let a viewer's picture equal the server's.
hide_cursor() {
  {
    echo "#define blank_width 16"
    echo "#define blank_height 16"
    echo "static char blank_bits[] = {"
    printf '0x00,%.0s' {1..31}
    echo "0x00};"
  } >"$work/blank.xbm"
  xsetroot -cursor "$work/blank.xbm" "$work/blank.xbm"
  xdotool mousemove $((sw - 1)) $((sh - 1))
}
hide_cursor

# Starts a program in the background and remembers it for cleanup and the final check.
start() {
  "$@" >"$work/$1.log" 2>&1 &
  pids+=("$!")
  names+=("$1")
}

# Waits until a window of this class is mapped, so keys and pictures reach it.
wait_window() {
  local deadline=$((SECONDS + 10))
  until xdotool search --onlyvisible --class "$1" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "session: no $1 window after 10 s" >&2; exit 1; }
    sleep 0.05
  done
}


# HOLD=1: the session's last picture stays on screen, still, until SIGTERM. $1 is
# what freezes the session's drawing, if ending the loop is not enough.
hold() {
  [[ ${HOLD:-0} == 1 ]] || return 0
  "$@"
  echo holding
  while :; do sleep 0.2; check_alive; done
}

# Fails if a program exited before the session ended (it drew nothing, or stopped).
check_alive() {
  local i
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[i]}" 2>/dev/null; then
      echo "session: ${names[i]} exited early:" >&2
      cat "$work/${names[i]}.log" >&2 || true
      exit 1
    fi
  done
}

xterm_args=(-fn 6x13 -fg black -bg white -cr black +sb -bw 0 -xrm 'XTerm*cursorBlink: false')

scrolling_text() {
  # Most of the screen, leaving a strip of root window below as real desktops do.
  local cols=$(((sw - 4) / 6)) rows=$(((sh - 4) / 13 - 2))
  start xterm "${xterm_args[@]}" -geometry "${cols}x${rows}+0+0" -e "$script" --log-lines "$rows" $((duration * 4)) "$work/log-done"
  wait_window xterm
  until [[ -e $work/log-done ]]; do sleep 0.1; check_alive; done
  hold true
}

# A photo-like picture twice the screen in each direction: colour gradients, patterned
# patches, lines and text, all from fixed seeds.
make_picture() {
  local w=$((sw * 2)) h=$((sh * 2)) out=$1
  pgmramp -lr "$w" "$h" >"$work/r.pgm"
  pgmramp -tb "$w" "$h" >"$work/g.pgm"
  pgmramp -ellipse "$w" "$h" >"$work/b.pgm"
  rgb3toppm "$work/r.pgm" "$work/g.pgm" "$work/b.pgm" >"$work/grad.ppm"
  ppmpat -camo -randomseed 28 $((w / 4)) $((h / 4)) >"$work/camo.ppm"
  ppmpat -tartan -randomseed 7 $((w / 6)) $((h / 5)) >"$work/tartan.ppm"
  ppmpat -poles -randomseed 3 $((w / 5)) $((h / 6)) >"$work/poles.ppm"
  pnmpaste "$work/camo.ppm" $((w / 2)) $((h / 8)) "$work/grad.ppm" |
    pnmpaste "$work/tartan.ppm" $((w / 10)) $((h * 3 / 5)) |
    pnmpaste "$work/poles.ppm" $((w * 2 / 3)) $((h * 2 / 3)) >"$work/pasted.ppm"
  ppmdraw -script="
    setcolor white; line 0 0 $((w - 1)) $((h - 1));
    setcolor red; line 0 $((h - 1)) $((w - 1)) 0;
    setcolor yellow; text $((w / 20)) $((h / 8)) 40 0 \"VARG PANNING IMAGE\";
    setcolor black; text $((w / 8)) $((h / 2)) 28 -15 \"The quick brown fox jumps over the lazy dog\";
    setcolor cyan; text $((w / 3)) $((h * 9 / 10)) 24 0 \"Boston 2.13 MB/s  San Diego 0.38 MB/s  Tromso 0.20 MB/s\"
  " "$work/pasted.ppm" >"$out"
}

panning_image() {
  make_picture "$work/picture.ppm"
  start feh --geometry "${sw}x$((sh - 32))+0+0" --no-menus "$work/picture.ppm"
  wait_window feh
  # Keys go to the focused window; no window manager gives feh the focus.
  xdotool search --onlyvisible --class feh windowfocus
  # feh starts centred and moves 20 px a key: pan right, down, left, up within the
  # picture and back to the start, one step every 0.2 s, round and round.
  local nx=$((sw * 3 / 160)) ny=$((sh * 3 / 160)) key i
  local -a path=()
  for key in "ctrl+Right $nx" "ctrl+Down $ny" "ctrl+Left $((2 * nx))" "ctrl+Up $((2 * ny))" \
    "ctrl+Right $nx" "ctrl+Down $ny"; do
    for ((i = 0; i < ${key#* }; i++)); do path+=("${key% *}"); done
  done
  local step
  for ((step = 0; step < duration * 5; step++)); do
    xdotool key "${path[step % ${#path[@]}]}"
    sleep 0.2
    check_alive
  done
  # Time for feh to draw the last step.
  hold sleep 0.3
}

# One frame of the plot: 120 samples of a slowly drifting signal and its model.
plot_frame() {
  awk -v t="$1" 'BEGIN {
    printf "set title \"requests per second, frame %d\"\n", t
    print "plot \"-\" with lines lw 2 title \"measured\", sin(x / 9.0 + " t * 0.05 ") * 40 + 100 title \"model\""
    seed = 28
    for (i = 0; i < 120; i++) {
      seed = (seed * 1103515245 + 12345) % 2147483648
      printf "%d %.2f\n", i, sin((i + t) / 9.0) * 40 + 100 + cos((i - t) / 23.0) * 15 + (seed % 100) / 20.0
    }
    print "e"
  }'
}

redrawn_plot() {
  exec 3> >(exec gnuplot >"$work/gnuplot.log" 2>&1)
  pids+=("$!")
  names+=(gnuplot)
  # No mouse: gnuplot would print the pointer's coordinates, which vary run to run.
  cat >&3 <<EOF
set term x11 noraise size $sw,$((sh - 40)) position 0,0
unset mouse
set grid
set xrange [0:119]
set yrange [0:180]
set xlabel "seconds"
EOF
  # gnuplot opens its window with the first plot.
  plot_frame 0 >&3
  wait_window gnuplot
  local t
  for ((t = 1; t <= duration * 2; t++)); do
    plot_frame "$t" >&3
    sleep 0.5
    check_alive
  done
  # Time for gnuplot to draw the last frame.
  hold sleep 0.5
}

# Slide $1 of a deck, the screen's size: a title band, a few lines of text, a
# photo-like picture and a patterned chart, from fixed seeds.
make_slide() {
  local n=$1 out=$2 w=$sw h=$((sh - 32))
  local -a bg=("245 245 240" "235 240 250" "250 240 235")
  ppmmake "rgb:$(printf '%02x/%02x/%02x' ${bg[n - 1]})" "$w" "$h" >"$work/slide-bg.ppm"
  pgmramp -lr "$w" 70 | pgmtoppm "#203060-#4080c0" >"$work/slide-band.ppm"
  # A grainy photo (smoothed noise) and a patterned chart.
  pgmnoise -randomseed $((n * 13)) $((w / 3)) $((h / 3)) | pnmsmooth -width 5 -height 5 2>/dev/null |
    pgmtoppm "#402010-#f0d0a0" >"$work/slide-photo.ppm"
  ppmpat -camo -randomseed $((n * 11)) $((w / 3)) $((h / 4)) >"$work/slide-chart.ppm"
  pnmpaste "$work/slide-band.ppm" 0 0 "$work/slide-bg.ppm" |
    pnmpaste "$work/slide-photo.ppm" $((w * 3 / 5)) $((h / 5)) |
    pnmpaste "$work/slide-chart.ppm" $((w / 12)) $((h * 3 / 5)) >"$work/slide-pasted.ppm"
  ppmdraw -script="
    setcolor white; text 30 50 30 0 \"Slide $n: slow links\";
    setcolor black; text 40 140 18 0 \"Boston 2.13 MB/s, 11 ms\";
    setcolor black; text 40 175 18 0 \"San Diego 0.38 MB/s, 72 ms\";
    setcolor black; text 40 210 18 0 \"Tromso 0.20 MB/s, 120 ms\";
    setcolor red; text 40 270 18 0 \"Point $n: seen is cheap\"
  " "$work/slide-pasted.ppm" >"$out"
}

revisited_slides() {
  local n
  for n in 1 2 3; do make_slide "$n" "$work/slide$n.ppm"; done
  start feh --geometry "${sw}x$((sh - 32))+0+0" --no-menus "$work/slide1.ppm" "$work/slide2.ppm" "$work/slide3.ppm"
  wait_window feh
  xdotool search --onlyvisible --class feh windowfocus
  # 1 2 3 2 1 2 3 2 …: forward twice, back twice, a flip every half second.
  local -a keys=(Right Right Left Left) step
  for ((step = 0; step < duration * 2; step++)); do
    xdotool key "${keys[step % 4]}"
    sleep 0.5
    check_alive
  done
  hold sleep 0.3
}

idle() {
  # 80×24 where it fits, leaving room for the clock and the parked pointer.
  local cols=$(((sw - 190) / 6)) rows=$(((sh - 40) / 13))
  ((cols <= 80)) || cols=80
  ((rows <= 24)) || rows=24
  start xterm "${xterm_args[@]}" -geometry "${cols}x${rows}+0+0" -e "$script" --static-text
  start xclock -update 1 -geometry "160x160+$((sw - 170))+10"
  wait_window xterm
  wait_window xclock
  local i
  for ((i = 0; i < duration * 5; i++)); do sleep 0.2; check_alive; done
  # A stopped xclock keeps its last picture; cleanup lets it go on to its end.
  hold kill -STOP "${pids[1]}"
}

case $1 in
  revisited-slides) revisited_slides ;;
  scrolling-text) scrolling_text ;;
  panning-image) panning_image ;;
  redrawn-plot) redrawn_plot ;;
  idle) idle ;;
esac
