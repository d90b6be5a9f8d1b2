# The revolve schedule of docs/tape.md, "Checkpointed loops":
#   build/examples/loop_schedule 20 3 > revolve.dat
#   gnuplot -e "data='revolve.dat'" docs/revolve.gp     (writes revolve.svg)
if (!exists("data")) data = 'revolve.dat'
set terminal svg size 900,420 font 'sans,13'
set output 'revolve.svg'
set title 'One gradient through a loop of 20 steps with 3 snapshots'
set xlabel 'evaluations of the step, in order'
set ylabel 'step'
set key outside right top
set yrange [-1:20]
set grid ytics lc rgb '#dddddd'
plot data using 1:(strcol(3) eq 'forward' ? $2 : 1/0) with points pt 7 ps 0.8 lc rgb '#888888' title 'forward pass', \
     data using 1:(strcol(3) eq 'recomputed' ? $2 : 1/0) with points pt 7 ps 0.8 lc rgb '#3366aa' title 'recomputed', \
     data using 1:(strcol(3) eq 'recorded' ? $2 : 1/0) with points pt 5 ps 1.0 lc rgb '#aa3333' title 'recorded and swept'
